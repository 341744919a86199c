"""The PodGroups of a snapshot (snapshot.py): ``scheduling.k8s.io`` PodGroups, the ones
GangScheduling reads, listed in the version the API serves (found by discovery, as the operator's
informer finds it: plugins/podgroups/native_cache.py VERSIONS), and CompositePodGroups
(``scheduling.k8s.io/v1alpha3``) when served; trimmed to what is read; and, at loading, each one
checked on its own: an object the GangScheduling cache cannot read is reported (the snapshot's
``warnings``) and skipped, never the whole snapshot (the operator ignores such a group the same way).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..plugins.podgroups.native_cache import GROUP as POD_GROUP_API, VERSIONS as POD_GROUP_VERSIONS
from ..plugins.podgroups.native_cache import NativePodGroup, api_path as pod_groups_path

# CompositePodGroups (scheduling.k8s.io, alpha in 1.37: only v1alpha3)
COMPOSITE_VERSION = "v1alpha3"
COMPOSITE_PATH = f"/apis/{POD_GROUP_API}/{COMPOSITE_VERSION}/compositepodgroups"


def _meta(obj: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {k: meta[k] for k in keys if meta.get(k) not in (None, {}, [])}


def trim_pod_group(obj: Mapping[str, Any], kind: str = "PodGroup") -> dict[str, Any]:
    """A PodGroup or CompositePodGroup: its spec and status as they are (GangScheduling reads the
    spec, and the status's PodGroupInitiallyScheduled condition, once True, is terminal)."""
    meta = _meta(obj, "name", "namespace", "uid", "generation", "creationTimestamp", "labels", "ownerReferences",
                 "deletionTimestamp")
    out: dict[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind") or kind, "metadata": meta,
                           "spec": obj.get("spec") or {}}
    if obj.get("status"):
        out["status"] = obj["status"]
    return out


def _where(key: str, i: int, o: Any) -> str:
    meta = o.get("metadata") if isinstance(o, dict) else None
    if isinstance(meta, dict) and isinstance(meta.get("name"), str) and meta["name"]:
        ns = meta.get("namespace")
        return f"{key}[{i}] ({ns if isinstance(ns, str) and ns else 'default'}/{meta['name']})"
    return f"{key}[{i}]"


def check_groups(warnings: list[str], doc: Mapping[str, Any], key: str) -> list[dict]:
    """An optional list of PodGroups (CompositePodGroups): each object the scheduler cannot read is
    reported on itself and skipped, never the whole snapshot (the operator ignores it the same way)."""
    what, parse = ("PodGroup", NativePodGroup.from_dict) if key == "podGroups" else ("CompositePodGroup", None)
    v = doc.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        warnings.append(f"{key}: must be a list, not {type(v).__name__}; no {what} loaded")
        return []
    out = []
    for i, o in enumerate(v):
        where = _where(key, i, o)
        if not isinstance(o, dict):
            warnings.append(f"{where}: must be an object, not {type(o).__name__}; skipped")
            continue
        meta = o.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            warnings.append(f"{where}: metadata.name: required; skipped")
            continue
        if "namespace" in meta and not isinstance(meta["namespace"], str):
            warnings.append(f"{where}: metadata.namespace: must be a string; skipped")
            continue
        if not isinstance(o.get("spec", {}), dict):
            warnings.append(f"{where}: spec: must be an object; skipped")
            continue
        if parse is not None:
            try:
                parse(o)
            except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError) as e:
                warnings.append(f"{where}: cannot be read as a {what}: {type(e).__name__}: {e}; skipped")
                continue
        out.append(o)
    return out


async def served_pod_group_versions(client) -> set[str]:
    """The scheduling.k8s.io versions the API server serves (discovery; empty when the group is
    not served or cannot be read)."""
    try:
        group = await client.get(f"/apis/{POD_GROUP_API}")
    except Exception:  # not served, no right to read it, unreachable: no PodGroups
        return set()
    versions = (group or {}).get("versions") if isinstance(group, dict) else None
    return {str(v.get("version")) for v in versions or [] if isinstance(v, dict)}


async def take_pod_groups(client) -> tuple[list[dict], list[dict], str]:
    """(PodGroups, CompositePodGroups, the PodGroup version read): PodGroups in the first version
    of native_podgroups.VERSIONS the API serves (as the operator's informer chooses it), and
    CompositePodGroups when v1alpha3 is served; none of either when not served (or not listable:
    403/404)."""
    served = await served_pod_group_versions(client)
    version = next((v for v in POD_GROUP_VERSIONS if v in served), "")

    async def items(path: str) -> list:
        try:
            return list((await client.get(path) or {}).get("items") or [])
        except Exception as e:
            if getattr(e, "status", None) in (403, 404):
                return []
            raise

    groups = [trim_pod_group(o) for o in await items(pod_groups_path(version))] if version else []
    composites = ([trim_pod_group(o, "CompositePodGroup") for o in await items(COMPOSITE_PATH)]
                  if COMPOSITE_VERSION in served else [])
    key = lambda o: ((o["metadata"].get("namespace") or ""), o["metadata"].get("name") or "")  # noqa: E731
    return sorted(groups, key=key), sorted(composites, key=key), version
