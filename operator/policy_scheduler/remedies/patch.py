"""The machine-readable form of a change to a pod: JSON Patch operations (RFC 6902: ``add``,
``replace``, ``remove``; paths are RFC 6901 JSON pointers) on the Pod object, applied by
``apply_pod_patch`` to a copy. A suggestion is verified by applying its own patch with this
function, so what a tool applies is exactly what was simulated.

Changes to the cluster name their object instead (``{"op": ..., "kind": "Node", "name": ...,
"path": ..., "value": ...}`` or ``{"op": "delete", "kind": "Pod", ...}``); they are not applied
to the pod (the suggestion's overlay of the node table simulates them).

Pure and bounded: at most MAX_OPS operations, each path at most MAX_DEPTH pointer tokens; only
the containers on the path are copied, the rest of the pod is shared with the original.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

MAX_OPS = 64
MAX_DEPTH = 16


class PatchError(ValueError):
    """An operation that does not apply to the pod (a path that is not there, a bad index)."""


def pointer(*tokens: str | int) -> str:
    """A JSON pointer from tokens (``~`` and ``/`` escaped)."""
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


def _tokens(path: str) -> list[str]:
    if not isinstance(path, str) or not path.startswith("/"):
        raise PatchError(f"not a JSON pointer: {path!r}")
    toks = [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]
    if len(toks) > MAX_DEPTH:
        raise PatchError(f"path too deep: {path[:80]!r}")
    return toks


def _index(container: list, tok: str, append: bool) -> int:
    if append and tok == "-":
        return len(container)
    if not tok.isdigit() or (len(tok) > 1 and tok[0] == "0"):
        raise PatchError(f"not an array index: {tok!r}")
    i = int(tok)
    if i > len(container) or (not append and i >= len(container)):
        raise PatchError(f"array index out of range: {i}")
    return i


def apply_pod_patch(pod: Mapping[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A copy of ``pod`` with ``ops`` applied in order; the original is not changed. Raises
    PatchError when an operation does not apply."""
    if len(ops) > MAX_OPS:
        raise PatchError(f"more than {MAX_OPS} operations")
    root: dict[str, Any] = dict(pod)
    copied: set[int] = {id(root)}  # containers already copied: written in place from then on
    for op in ops:
        kind = op.get("op")
        toks = _tokens(op.get("path", ""))
        if not toks:
            raise PatchError("the whole object cannot be replaced")
        parent: Any = root
        for depth, tok in enumerate(toks[:-1]):
            if isinstance(parent, dict):
                if tok not in parent:
                    raise PatchError(f"no {pointer(*toks[:depth + 1])} in the pod")
                child = parent[tok]
                key: str | int = tok
            elif isinstance(parent, list):
                key = _index(parent, tok, False)
                child = parent[key]
            else:
                raise PatchError(f"{pointer(*toks[:depth])} is not an object or array")
            if isinstance(child, (dict, list)) and id(child) not in copied:
                child = dict(child) if isinstance(child, dict) else list(child)
                copied.add(id(child))
                parent[key] = child
            parent = child
        last = toks[-1]
        value = copy.deepcopy(op.get("value"))
        if isinstance(parent, dict):
            if kind == "add":
                parent[last] = value
            elif kind == "replace":
                if last not in parent:
                    raise PatchError(f"no {op['path']} to replace")
                parent[last] = value
            elif kind == "remove":
                if last not in parent:
                    raise PatchError(f"no {op['path']} to remove")
                del parent[last]
            else:
                raise PatchError(f"unsupported operation {kind!r}")
        elif isinstance(parent, list):
            if kind == "add":
                parent.insert(_index(parent, last, True), value)
            elif kind == "replace":
                parent[_index(parent, last, False)] = value
            elif kind == "remove":
                del parent[_index(parent, last, False)]
            else:
                raise PatchError(f"unsupported operation {kind!r}")
        else:
            raise PatchError(f"{op.get('path')!r}: the parent is not an object or array")
    return root
