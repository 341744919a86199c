"""policy-scheduler command line: the parser and ``main``. The commands live in commands/: run the
operator (commands/run.py: its flags; serve.py builds and runs it), explain a decision
(commands/explain.py; explain.py prints the record), snapshot the cluster, simulate policies on it and
tune a policy's weights offline (commands/whatif.py; whatif/ computes and writes their results), the
kubeconfig's clusters and their capacity (commands/clusters.py), a policy's revisions and rollout
(commands/rollout.py), shell completion (commands/completion.py). Printing the CRD is here, and what
``main`` does for every command: a reader that went away ends it quietly."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__


def cmd_crd(a: argparse.Namespace) -> int:
    from .policy.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .commands import clusters, completion, explain, rollout, run, whatif

    p = argparse.ArgumentParser(
        prog="policy-scheduler",
        description="A Kubernetes scheduler whose policies are SchedulingPolicy custom resources. "
                    "Pods with spec.schedulerName: policy-scheduler are placed by the policy named in their "
                    "label policy-scheduler.io/policy (else the policy named 'default').")
    p.add_argument("--version", action="version", version=f"policy-scheduler {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    run.add_parser(sub)
    c = sub.add_parser("crd", help="print the SchedulingPolicy CRD (generated from the API models)")
    c.set_defaults(fn=cmd_crd)
    explain.add_parser(sub)
    whatif.add_parser(sub)
    clusters.add_parser(sub)
    rollout.add_parser(sub)
    completion.add_parser(sub, p)
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        code = a.fn(a)
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (`policy-scheduler crd | head -1`): stop quietly, as a command killed
        # by SIGPIPE does (status 141); what is left in the buffer goes nowhere, so that the flush
        # at exit does not fail again
        _stdout_to_devnull()
        return 141
    return code


def _stdout_to_devnull() -> None:
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (AttributeError, OSError, ValueError):  # a stdout without a file descriptor (tests capture it)
        pass


if __name__ == "__main__":
    sys.exit(main())
