"""The commands of `policy-scheduler` (cli.py builds the parser and runs one): each module adds its
subcommands' flags (``add_parser``) and holds what they run. Here: what several of them share
(the kubeconfig flags' help, the cluster flags, the argparse types)."""

from __future__ import annotations

import argparse

from .. import SCHEDULER_NAME

KUBECONFIG_HELP = ("kubeconfig file (default: $KUBECONFIG, several files merged as kubectl does, else "
                   "~/.kube/config, else the in-cluster service account). Client certificates, tokens, token "
                   "files and exec credential plugins; expiring tokens are renewed")
CONTEXT_HELP = "kubeconfig context to use (default: the kubeconfig's current-context)"


def duration(v: str) -> float:
    from ..policy.fields import duration_seconds

    try:
        return duration_seconds(v)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def boolean(v: str) -> bool:
    if v.lower() in ("true", "1", "yes"):
        return True
    if v.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{v!r} is not true or false")


def _integer(v: str) -> int:
    try:
        return int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not an integer") from None


def positive(v: str) -> int:
    """argparse type: an integer >= 1."""
    n = _integer(v)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{v!r} is not a positive integer")
    return n


def non_negative(v: str) -> int:
    """argparse type: an integer >= 0."""
    n = _integer(v)
    if n < 0:
        raise argparse.ArgumentTypeError(f"{v!r} is negative")
    return n


def namespaced(v: str) -> tuple[str, str]:
    ns, sep, name = v.partition("/")
    if not sep or not ns or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{v!r} is not NAMESPACE/NAME")
    return ns, name


def url(v: str) -> str:
    if not v.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"{v!r} is not an http(s) URL")
    return v


def cluster_flags(p: argparse.ArgumentParser, several: bool = False) -> None:
    """The flags naming the cluster to read; ``several``: --context may be repeated (a list)."""
    from ..cache.policies import DEFAULT_POLICY

    g = p.add_argument_group("cluster", "where the state is read from (the live cluster; simulate and tune read it "
                                        "only without --snapshot)")
    g.add_argument("--kubeconfig", default=None, metavar="FILE", help=KUBECONFIG_HELP)
    if several:
        g.add_argument("--context", action="append", default=None, metavar="NAME",
                       help=CONTEXT_HELP + "; repeat it to simulate the same pods on each context's cluster and "
                                           "rank the clusters (with --snapshot too: each file is one more cluster)")
    else:
        g.add_argument("--context", default=None, help=CONTEXT_HELP)
    g.add_argument("--scheduler-name", default=SCHEDULER_NAME,
                   help=f"the scheduler whose policies and pending pods are read (default {SCHEDULER_NAME})")
    g.add_argument("--default-policy", default=DEFAULT_POLICY, metavar="NAME",
                   help=f"the operator's --default-policy (default {DEFAULT_POLICY!r})")
    g.add_argument("--prometheus-url", default=None, type=url,
                   help="Prometheus of the policies' metric plugins (the operator's --prometheus-url): their "
                        "current values go into the snapshot")

