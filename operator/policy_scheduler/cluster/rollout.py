"""`policy-scheduler rollout history|undo POLICY`: a policy's revisions, as `kubectl rollout` shows
a Deployment's. The operator records every valid generation of a policy as a ControllerRevision
(cache/revisions.py, cluster/revisions.py); ``history`` lists them (number, generation, age, what
changed, which one the pods are scheduled with) and ``undo`` writes one back as the policy's spec.

The commands run as the user of the kubeconfig: they read the policy and LIST the revisions;
``undo`` also updates the policy (PUT, with its resourceVersion: a concurrent change is read again).
cli.py only wires the parser (``add_parser``).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import sys
import time
from typing import Any, Mapping, TextIO

from ..cache import revisions as rev
from ..timefmt import parse_rfc3339

GROUP_RESOURCE = "schedulingpolicy.policy-scheduler.io"
POLICIES = "/apis/policy-scheduler.io/v1alpha1/schedulingpolicies"
ATTEMPTS = 5  # PUTs of undo in a row that may meet a concurrent change


class RolloutError(Exception):
    """Why a command cannot do what it was asked: one line, exit status 1."""


def non_negative(v: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not an integer") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{v!r} is negative")
    return n


def add_parser(sub, kubeconfig_help: str, context_help: str) -> None:
    """The `rollout` command and its `history` and `undo` subcommands."""
    ro = sub.add_parser("rollout", help="a policy's revisions: history, undo",
                        description="Every valid generation of a SchedulingPolicy is recorded by the operator as "
                                    "a ControllerRevision in its namespace (docs/policy-reference.md#revisions).")
    rs = ro.add_subparsers(dest="rollout_command", required=True, metavar="{history,undo}")
    h = rs.add_parser("history", help="list a policy's revisions",
                      description="Lists the policy's revisions: number, generation, creation time and age, what "
                                  "changed from the revision before, and the one its pods are scheduled with.")
    h.add_argument("--revision", type=int, default=None, metavar="N", help="print the spec of revision N")
    h.set_defaults(fn=cmd_history)
    u = rs.add_parser("undo", help="write a revision back as the policy's spec",
                      description="Writes the spec of a revision back to the policy, as `kubectl rollout undo`: "
                                  "by default the revision before the one in use. The operator then records it "
                                  "again as the newest revision.")
    u.add_argument("--to-revision", type=int, default=None, metavar="N",
                   help="the revision to go back to (default: the one before the revision in use)")
    u.set_defaults(fn=cmd_undo)
    for p in (h, u):
        p.add_argument("policy", metavar="POLICY", help="the SchedulingPolicy's name")
        p.add_argument("--kubeconfig", default=None, metavar="FILE", help=kubeconfig_help)
        p.add_argument("--context", default=None, help=context_help)
        p.add_argument("--revision-namespace", default=rev.default_namespace(), metavar="NAMESPACE",
                       help="the operator's --revision-namespace (default: $POD_NAMESPACE, else "
                            f"{rev.DEFAULT_NAMESPACE})")


# ---------------------------------------------------------------------------------- reading
async def read(client, policy: str, namespace: str) -> tuple[dict[str, Any], list[rev.Revision]]:
    """The policy and its revisions (of its uid), newest first. RolloutError for a missing policy."""
    from .kubeclient import ApiError

    try:
        obj = await client.get(f"{POLICIES}/{policy}")
    except ApiError as e:
        if e.status == 404:
            raise RolloutError(f'SchedulingPolicy "{policy}" not found') from None
        raise
    body = await client.get(rev.collection_path(namespace), labelSelector=rev.selector(policy))
    uid = str((obj.get("metadata") or {}).get("uid") or "")
    return obj, rev.of_policy(rev.parse_all((body or {}).get("items") or []), policy, uid)


def age(created: str, now: float) -> str:
    """kubectl's short age: 45s, 12m, 5h, 3d."""
    try:
        s = max(0, int(now - parse_rfc3339(created)))
    except ValueError:
        return "<unknown>"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def _ready(obj: Mapping[str, Any]) -> str:
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((str(c.get("status")) for c in conds if c.get("type") == "Ready"), "Unknown")


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] + "\n")


def write_history(obj: Mapping[str, Any], revisions: list[rev.Revision], namespace: str, out: TextIO,
                  now: float | None = None) -> None:
    """The table of ``history``: oldest first; CHANGE against the revision listed before."""
    name = (obj.get("metadata") or {}).get("name", "")
    status = obj.get("status") or {}
    in_use = status.get("revision")
    out.write(f"{GROUP_RESOURCE}/{name}: generation {(obj.get('metadata') or {}).get('generation')}, "
              f"Ready {_ready(obj)}, " + (f"scheduling with revision {in_use}" if in_use else
                                          "no revision in use") + "\n")
    if not revisions:
        out.write(f"No revisions in namespace {namespace}.\n")
        return
    now = time.time() if now is None else now
    rows = [["REVISION", "GENERATION", "CREATED", "AGE", "IN USE", "CHANGE"]]
    before = None
    for r in sorted(revisions, key=lambda r: r.number):
        rows.append([str(r.number), str(r.generation or "?"), r.created or "?", age(r.created, now),
                     "*" if r.number == in_use else "", rev.describe_change(before, r.spec)])
        before = r.spec
    _table(rows, out)


def write_revision(obj: Mapping[str, Any], r: rev.Revision, namespace: str, out: TextIO) -> None:
    """``history --revision N``: the revision and its spec (YAML)."""
    import yaml

    name = (obj.get("metadata") or {}).get("name", "")
    out.write(f"{GROUP_RESOURCE}/{name} revision {r.number}: generation {r.generation or '?'}, created "
              f"{r.created or '?'}, ControllerRevision {namespace}/{r.name}\n")
    out.write(yaml.safe_dump({"spec": r.spec}, sort_keys=False, width=120))


def undo_target(obj: Mapping[str, Any], revisions: list[rev.Revision], to_revision: int | None) -> rev.Revision:
    """The revision ``undo`` writes back: ``to_revision``, else the newest before the one in use
    (status.revision, else the newest revision)."""
    name = (obj.get("metadata") or {}).get("name", "")
    if not revisions:
        raise RolloutError(f'no revisions of SchedulingPolicy "{name}" found')
    numbers = sorted(r.number for r in revisions)
    if to_revision is not None:
        r = next((r for r in revisions if r.number == to_revision), None)
        if r is None:
            raise RolloutError(f"revision {to_revision} of SchedulingPolicy \"{name}\" not found (revisions: "
                               f"{', '.join(map(str, numbers))})")
        return r
    current = (obj.get("status") or {}).get("revision") or numbers[-1]
    older = [r for r in revisions if r.number < current]
    if not older:
        raise RolloutError(f'SchedulingPolicy "{name}" has no revision before revision {current}')
    return max(older, key=lambda r: r.number)


async def undo(client, policy: str, namespace: str, to_revision: int | None) -> str:
    """Write the target revision's spec to the policy; the line to print."""
    from .kubeclient import ApiError

    for attempt in range(ATTEMPTS):
        obj, revisions = await read(client, policy, namespace)
        target = undo_target(obj, revisions, to_revision)
        if rev.canonical(obj.get("spec")) == rev.canonical(target.spec):
            return (f"{GROUP_RESOURCE}/{policy} skipped rollback (current spec already matches revision "
                    f"{target.number})")
        body = copy.deepcopy(dict(obj))
        body.pop("status", None)
        (body.get("metadata") or {}).pop("managedFields", None)
        body["spec"] = copy.deepcopy(target.spec)
        try:
            await client.request("PUT", f"{POLICIES}/{policy}", body)
        except ApiError as e:
            if e.status == 409 and attempt < ATTEMPTS - 1:  # changed since we read it: read again
                continue
            raise
        return f"{GROUP_RESOURCE}/{policy} rolled back to revision {target.number} (generation {target.generation})"
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------- commands
def _run(a: argparse.Namespace, who: str, work) -> int:
    from .kubeclient import REQUEST_ERRORS, CredentialsError, KubeClient, load_credentials

    try:
        creds = load_credentials(a.kubeconfig, a.context)
    except (CredentialsError, RuntimeError, KeyError, ValueError) as e:
        print(f"policy-scheduler rollout {who}: cannot load credentials: {e}", file=sys.stderr)
        return 1

    async def go():
        client = KubeClient(creds)
        try:
            return await work(client)
        finally:
            await client.close()

    try:
        return asyncio.run(go())
    except RolloutError as e:
        print(f"policy-scheduler rollout {who}: {e}", file=sys.stderr)
    except REQUEST_ERRORS as e:
        print(f"policy-scheduler rollout {who}: {type(e).__name__}: {e}", file=sys.stderr)
    return 1


def cmd_history(a: argparse.Namespace) -> int:
    async def work(client) -> int:
        obj, revisions = await read(client, a.policy, a.revision_namespace)
        if a.revision is None:
            write_history(obj, revisions, a.revision_namespace, sys.stdout)
            return 0
        r = next((r for r in revisions if r.number == a.revision), None)
        if r is None:
            raise RolloutError(f'revision {a.revision} of SchedulingPolicy "{a.policy}" not found')
        write_revision(obj, r, a.revision_namespace, sys.stdout)
        return 0

    return _run(a, "history", work)


def cmd_undo(a: argparse.Namespace) -> int:
    async def work(client) -> int:
        print(await undo(client, a.policy, a.revision_namespace, a.to_revision))
        return 0

    return _run(a, "undo", work)
