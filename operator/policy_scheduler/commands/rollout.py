"""`policy-scheduler rollout history|undo|diff|promote|abort POLICY`: a policy's revisions and its
staged rollout, as `kubectl rollout` shows a Deployment's. The operator records every valid
generation of a policy as a ControllerRevision (cache/revisions.py, cluster/revisions.py);
``history`` lists them (number, generation, age, what changed, which one the pods are scheduled
with) and ``undo`` writes one back as the policy's spec. ``diff`` shows what a rollout's candidate
changes, ``promote`` and ``abort`` end the rollout.

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
from . import CONTEXT_HELP, KUBECONFIG_HELP

GROUP_RESOURCE = "schedulingpolicy.policy-scheduler.io"
POLICIES = "/apis/policy-scheduler.io/v1alpha1/schedulingpolicies"
ATTEMPTS = 5  # PUTs of undo in a row that may meet a concurrent change


class RolloutError(Exception):
    """Why a command cannot do what it was asked: one line, exit status 1."""


def add_parser(sub) -> None:
    """The `rollout` command and its subcommands."""
    ro = sub.add_parser("rollout", help="a policy's revisions and rollout: history, undo, diff, promote, abort",
                        description="Every valid generation of a SchedulingPolicy is recorded by the operator as "
                                    "a ControllerRevision in its namespace (docs/policy-reference.md#revisions).")
    rs = ro.add_subparsers(dest="rollout_command", required=True, metavar="{history,undo,diff,promote,abort}")
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
    d = rs.add_parser("diff", help="what a rollout's candidate decided beside the policy",
                      description="Prints the policy's status.rollout: for a Shadow, the decisions the candidate made "
                                  "beside the policy, how many changed (the policy's node not among the candidate's "
                                  "best), the plugins that moved them and sample pods; for a Canary, both arms' counts "
                                  "and the window's measures. --html writes the same as a page (simulate's report).")
    d.add_argument("--html", default=None, metavar="FILE", help="also write an HTML page to FILE")
    d.set_defaults(fn=cmd_diff)
    pr = rs.add_parser("promote", help="make the rollout's candidate the policy's chain now",
                       description="Writes spec.rollout.candidate's plugins, disabled and percentageOfNodesToScore "
                                   "into the spec and removes spec.rollout (what an automatic promotion writes).")
    pr.set_defaults(fn=cmd_promote)
    ab = rs.add_parser("abort", help="remove spec.rollout: every pod is scheduled with spec.plugins",
                       description="Removes spec.rollout; the rollout ends as Aborted.")
    ab.set_defaults(fn=cmd_abort)
    for p in (h, u, d, pr, ab):
        p.add_argument("policy", metavar="POLICY", help="the SchedulingPolicy's name")
        p.add_argument("--kubeconfig", default=None, metavar="FILE", help=KUBECONFIG_HELP)
        p.add_argument("--context", default=None, help=CONTEXT_HELP)
        p.add_argument("--revision-namespace", default=rev.default_namespace(), metavar="NAMESPACE",
                       help="the operator's --revision-namespace (default: $POD_NAMESPACE, else "
                            f"{rev.DEFAULT_NAMESPACE})")


# ---------------------------------------------------------------------------------- reading
async def get_policy(client, policy: str) -> dict[str, Any]:
    """The policy; RolloutError when it does not exist."""
    from ..cluster.kubeclient import ApiError

    try:
        return await client.get(f"{POLICIES}/{policy}")
    except ApiError as e:
        if e.status == 404:
            raise RolloutError(f'SchedulingPolicy "{policy}" not found') from None
        raise


async def read(client, policy: str, namespace: str) -> tuple[dict[str, Any], list[rev.Revision]]:
    """The policy and its revisions (of its uid), newest first. RolloutError for a missing policy."""
    obj = await get_policy(client, policy)
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
    from ..cluster.kubeclient import ApiError

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
    from ..cluster.credentials import CredentialsError, load_credentials
    from ..cluster.kubeclient import REQUEST_ERRORS, KubeClient

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


# ---------------------------------------------------------------------------------- spec.rollout
def write_diff(obj: Mapping[str, Any], out: TextIO) -> dict[str, Any]:
    """``diff``: the policy's status.rollout as text; returns it (RolloutError when there is none)."""
    from ..whatif.report import write_shadow

    name = (obj.get("metadata") or {}).get("name", "")
    ro = (obj.get("status") or {}).get("rollout")
    if not isinstance(ro, dict):
        has = isinstance((obj.get("spec") or {}).get("rollout"), dict)
        raise RolloutError(f'SchedulingPolicy "{name}" has ' + (
            "spec.rollout but no status.rollout yet (is the operator running?)" if has else "no rollout"))
    out.write(f"{GROUP_RESOURCE}/{name}: {ro.get('strategy')} of candidate {ro.get('candidateHash')}, "
              f"{ro.get('phase')} since {ro.get('startTime')}: {ro.get('message', '')}\n")
    if isinstance(ro.get("shadow"), dict):
        write_shadow(name, ro["shadow"], out)
    arms = [(k, ro.get(k)) for k in ("stable", "canary") if isinstance(ro.get(k), dict)]
    if arms:
        analysis = ro.get("analysis") or {}
        keys = ("failureRate", "timeToScheduledP95Seconds", "nodesUsedPerPod", "imbalance", "zoneSkew")
        rows = [["ARM", "ATTEMPTS", "FAILURES", "BOUND", "WINDOW: FAILURE RATE", "P95 TO SCHEDULED (S)",
                 "NODES/POD", "IMBALANCE", "ZONE SKEW"]]
        for k, a in arms:
            m = analysis.get(k) or {}
            rows.append([k, str(a.get("attempts", 0)), str(a.get("failures", 0)), str(a.get("bound", 0)),
                         *("-" if m.get(x) is None else f"{m[x]:g}" for x in keys)])
        _table(rows, out)
    return ro


async def patch_rollout(client, policy: str, promote: bool) -> str:
    """``promote``: the candidate's chain into the spec, spec.rollout removed; ``abort``: only
    the latter. The line to print."""
    obj = await get_policy(client, policy)
    ro = (obj.get("spec") or {}).get("rollout")
    if not isinstance(ro, dict):
        raise RolloutError(f'SchedulingPolicy "{policy}" has no spec.rollout')
    spec: dict[str, Any] = {"rollout": None}
    if promote:
        cand = ro.get("candidate") or {}
        if not isinstance(cand, dict) or not cand.get("plugins"):
            raise RolloutError(f'SchedulingPolicy "{policy}": spec.rollout.candidate has no plugins')
        spec.update(plugins=cand["plugins"], disabled=cand.get("disabled") or None,
                    percentageOfNodesToScore=cand.get("percentageOfNodesToScore"))
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    await client.merge_patch(f"{POLICIES}/{policy}", {"metadata": {"resourceVersion": rv}, "spec": spec})
    return f"{GROUP_RESOURCE}/{policy} " + ("promoted: spec.plugins is the candidate's chain" if promote
                                           else "rollout aborted: spec.rollout removed")


def cmd_diff(a: argparse.Namespace) -> int:
    async def work(client) -> int:
        from ..whatif.report import shadow_page

        ro = write_diff(await get_policy(client, a.policy), sys.stdout)
        if a.html:
            note = (f"status.rollout of SchedulingPolicy {a.policy}: {ro.get('strategy')} of candidate "
                    f"{ro.get('candidateHash')}, {ro.get('phase')} since {ro.get('startTime')}.")
            with open(a.html, "w", encoding="utf-8") as f:
                f.write(shadow_page(a.policy, ro.get("shadow") or {}, note))
            print(f"wrote {a.html}")
        return 0

    return _run(a, "diff", work)


def cmd_promote(a: argparse.Namespace) -> int:
    async def work(client) -> int:
        print(await patch_rollout(client, a.policy, True))
        return 0

    return _run(a, "promote", work)


def cmd_abort(a: argparse.Namespace) -> int:
    async def work(client) -> int:
        print(await patch_rollout(client, a.policy, False))
        return 0

    return _run(a, "abort", work)
