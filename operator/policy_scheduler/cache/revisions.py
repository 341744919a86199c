"""A policy's revisions: every valid generation of a SchedulingPolicy is recorded in the cluster
as an apps/v1 ControllerRevision, as Deployments and StatefulSets record theirs. This module is
the bookkeeping, pure (no client): names, hashes, numbers, the history limit, the revision to
fall back on, what changed between two revisions. cluster/revisions.py reads and writes them;
commands/rollout.py is `policy-scheduler rollout history|undo`.

A revision of policy ``binpack`` lives in the operator's namespace (``--revision-namespace``) as::

    apiVersion: apps/v1
    kind: ControllerRevision
    metadata:
      name: binpack-<hash of the spec>
      labels: {policy-scheduler.io/policy: binpack}
      annotations: {policy-scheduler.io/generation: "4"}
      ownerReferences: [{apiVersion: policy-scheduler.io/v1alpha1, kind: SchedulingPolicy,
                         name: binpack, uid: ..., controller: true}]
    data: <the policy's spec>
    revision: 3

``revision`` grows by one per recorded generation of the policy. A spec applied again reuses its
ControllerRevision (same hash, same name), whose number is bumped to the newest, as a
Deployment's rollback does. Revisions owned by an earlier policy of the same name (another uid)
are not the policy's: they are deleted when the policy is next recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .. import API_GROUP, API_VERSION, POLICY_LABEL

KIND = "SchedulingPolicy"
LABEL = POLICY_LABEL  # the policy's name (label_value) on each of its revisions
GENERATION_ANNOTATION = "policy-scheduler.io/generation"
DEFAULT_NAMESPACE = "policy-scheduler-system"  # manifests/
DEFAULT_HISTORY_LIMIT = 10
HASH_LEN = 10
MAX_NAME = 253  # a DNS subdomain
MAX_LABEL = 63


def default_namespace() -> str:
    """Where revisions live unless --revision-namespace says otherwise: the operator's own
    namespace (POD_NAMESPACE, from the downward API in manifests/04-deployment.yaml), else
    manifests/' namespace."""
    return os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE


def collection_path(namespace: str) -> str:
    return f"/apis/apps/v1/namespaces/{namespace}/controllerrevisions"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def canonical(spec: Any) -> str:
    """The spec as one JSON text, keys sorted: equal specs, equal texts."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def spec_hash(spec: Any) -> str:
    """A short hash of the spec (hex, HASH_LEN characters)."""
    return _digest(canonical(spec))[:HASH_LEN]


def revision_name(policy: str, spec: Any) -> str:
    """``<policy>-<hash of the spec>``, the policy part shortened to fit a DNS subdomain."""
    h = spec_hash(spec)
    return f"{policy[:MAX_NAME - HASH_LEN - 1].rstrip('-.')}-{h}"


def label_value(policy: str) -> str:
    """The policy's name as a label value (at most 63 characters: a longer name is shortened and
    suffixed with a hash of itself, so that it stays distinct)."""
    if len(policy) <= MAX_LABEL:
        return policy
    return f"{policy[:MAX_LABEL - HASH_LEN - 1].rstrip('-._')}-{_digest(policy)[:HASH_LEN]}"


def selector(policy: str | None = None) -> str:
    """The label selector of one policy's revisions, or of every policy's (``None``)."""
    return LABEL if policy is None else f"{LABEL}={label_value(policy)}"


@dataclass(frozen=True)
class Revision:
    """One ControllerRevision of a policy, as read."""

    name: str
    policy: str  # the owner's name
    uid: str  # the owner's uid ("" without an ownerReference)
    number: int
    generation: int  # the policy's generation it was last recorded for
    spec: Any = field(compare=False)
    created: str = ""  # metadata.creationTimestamp


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def parse(obj: Mapping[str, Any]) -> Revision | None:
    """A ControllerRevision of a SchedulingPolicy (its ownerReference, else its label), or None."""
    meta = obj.get("metadata") or {}
    owner = next((o for o in meta.get("ownerReferences") or [] if isinstance(o, dict) and o.get("kind") == KIND
                  and str(o.get("apiVersion", "")).startswith(f"{API_GROUP}/")), None)
    policy = str(owner.get("name") or "") if owner else str((meta.get("labels") or {}).get(LABEL) or "")
    if not policy or "name" not in meta:
        return None
    return Revision(name=str(meta["name"]), policy=policy, uid=str((owner or {}).get("uid") or ""),
                    number=_int(obj.get("revision")),
                    generation=_int((meta.get("annotations") or {}).get(GENERATION_ANNOTATION)),
                    spec=obj.get("data"), created=str(meta.get("creationTimestamp") or ""))


def parse_all(items: Iterable[Mapping[str, Any]]) -> list[Revision]:
    return [r for r in (parse(i) for i in items) if r is not None]


def of_policy(revisions: Iterable[Revision], policy: str, uid: str) -> list[Revision]:
    """The revisions of this policy (this uid), newest first."""
    return sorted((r for r in revisions if r.policy == policy and r.uid == uid), key=lambda r: -r.number)


def revision_object(policy: str, uid: str, spec: Any, generation: int, number: int) -> dict[str, Any]:
    """A new ControllerRevision recording ``spec`` (generation ``generation``) as revision ``number``."""
    return {
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {
            "name": revision_name(policy, spec),
            "labels": {LABEL: label_value(policy)},
            "annotations": {GENERATION_ANNOTATION: str(generation)},
            # a namespaced object may have a cluster-scoped owner: deleting the policy lets the
            # garbage collector delete its revisions
            "ownerReferences": [{"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, "name": policy,
                                 "uid": uid, "controller": True}],
        },
        "data": spec,
        "revision": number,
    }


@dataclass
class Plan:
    """The writes that record a spec as a policy's newest revision: ``delete_first`` (revisions of
    an earlier policy of that name), then ``create`` or ``update`` (a merge patch of ``name``),
    then ``prune`` (revisions beyond the history limit). ``number``: the spec's revision after."""

    name: str
    number: int
    create: dict[str, Any] | None = None
    update: dict[str, Any] | None = None
    delete_first: list[str] = field(default_factory=list)
    prune: list[str] = field(default_factory=list)

    @property
    def writes(self) -> bool:
        return bool(self.create or self.update or self.delete_first or self.prune)


def plan(revisions: Iterable[Revision], policy: str, uid: str, spec: Any, generation: int, limit: int) -> Plan:
    """What to write so that ``spec`` (the policy's valid generation ``generation``) is its newest
    revision, keeping at most ``limit`` revisions (the new one included, at least one)."""
    revisions = [r for r in revisions if r.policy == policy]
    name = revision_name(policy, spec)
    mine = of_policy(revisions, policy, uid)
    stale = [r.name for r in revisions if r.uid != uid]
    top = max((r.number for r in mine), default=0)
    existing = next((r for r in mine if r.name == name), None)
    if existing is None:
        p = Plan(name, top + 1, create=revision_object(policy, uid, spec, generation, top + 1), delete_first=stale)
        after = [p.number] + [r.number for r in mine]
        names = {r.number: r.name for r in mine}
    else:
        # the same spec again: its revision becomes the newest (a number it already holds if it is)
        number = existing.number if existing.number == top else top + 1
        patch: dict[str, Any] = {}
        if number != existing.number:
            patch["revision"] = number
        if existing.generation != generation:
            patch["metadata"] = {"annotations": {GENERATION_ANNOTATION: str(generation)}}
        p = Plan(name, number, update=patch or None, delete_first=stale)
        after = [number] + [r.number for r in mine if r is not existing]
        names = {r.number: r.name for r in mine if r is not existing}
    keep = max(1, limit)
    p.prune = [names[n] for n in sorted(after, reverse=True)[keep:]]
    return p


def choose(revisions: Iterable[Revision], policy: str, uid: str, valid) -> tuple[Revision | None, list[str]]:
    """The newest revision of the policy whose spec ``valid(revision)`` accepts (it returns the
    spec's problems, empty when valid), and the problems of the newer ones tried before it."""
    problems: list[str] = []
    for r in of_policy(revisions, policy, uid):
        errors = valid(r)
        if not errors:
            return r, problems
        problems.append(f"revision {r.number}: {'; '.join(errors)}")
    return None, problems


# ------------------------------------------------------------------------------ what changed
def _plugins(spec: Any) -> dict[str, Mapping[str, Any]]:
    plugins = spec.get("plugins") if isinstance(spec, Mapping) else None
    return {str(p["name"]): p for p in plugins or [] if isinstance(p, Mapping) and "name" in p}


def _weight(p: Mapping[str, Any]) -> str:
    w = p.get("weight")
    return "unset" if w is None else str(w)


def _plugin_text(p: Mapping[str, Any]) -> str:
    return f"{p['name']}" + ("" if p.get("weight") is None else f"(w={p['weight']})")


def describe_change(before: Any, after: Any) -> str:
    """What ``after`` changes of ``before`` (two specs), in a few words: plugins added (+) and
    removed (-), weights, args fields, plugin order, other spec fields; for the first revision
    (``before`` None), its plugins."""
    if before is None:
        return "plugins: " + ", ".join(_plugin_text(p) for p in _plugins(after).values())
    old, new = _plugins(before), _plugins(after)
    parts = [f"+{_plugin_text(new[n])}" for n in new if n not in old]
    parts += [f"-{n}" for n in old if n not in new]
    for n in (n for n in new if n in old):
        o, w = old[n], new[n]
        if o.get("weight") != w.get("weight"):
            parts.append(f"{n} weight {_weight(o)}->{_weight(w)}")
        oa, na = o.get("args") or {}, w.get("args") or {}
        if oa != na:
            if isinstance(oa, Mapping) and isinstance(na, Mapping):
                keys = sorted(k for k in set(oa) | set(na) if oa.get(k) != na.get(k))
                parts.append(f"{n} args " + ", ".join(keys))
            else:
                parts.append(f"{n} args")
    if [n for n in new if n in old] != [n for n in old if n in new]:
        parts.append("plugin order")
    b = before if isinstance(before, Mapping) else {}
    a = after if isinstance(after, Mapping) else {}
    parts += [k for k in sorted(set(a) | set(b)) if k != "plugins" and a.get(k) != b.get(k)]
    return "; ".join(parts) or "no change"
