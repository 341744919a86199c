"""resourceVersion comparison, shared by the caches of the plugin families (volumes, DRA)."""

from __future__ import annotations


def resource_version_newer(a: str, b: str) -> bool:
    """Is resourceVersion ``a`` at least as new as ``b``? (etcd revisions: integers; anything
    that does not parse compares as equal only.)"""
    try:
        return int(a) >= int(b)
    except (TypeError, ValueError):
        return a == b
