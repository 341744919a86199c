"""An in-memory stand-in for cluster/kubeclient.KubeClient: the async methods the engine, the
event recorder and the status writer call, each recorded in ``calls``; ``fail`` makes calls
raise an ApiError, as the API server would answer. ``serve(collection)`` keeps the objects of one
collection path as the API server would: POST creates (409 when the name exists), GET lists (with
a labelSelector of ``key`` or ``key=value`` terms) or reads one, merge PATCH, PUT and DELETE
change them (404 when absent)."""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import Any

from policy_scheduler.cluster.kubeclient import ApiError


@dataclass
class Call:
    method: str  # get, post, merge_patch, strategic_patch, bind, close, or a request's method (delete)
    path: str
    body: Any = None


@dataclass
class _Failure:
    method: str
    path_contains: str
    status: int
    body: Any
    times: int | None  # None: every matching call


class FakeClient:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.objects: dict[str, Any] = {}  # path -> what ``get`` answers (default: an empty list)
        self.closed = False
        self._failures: list[_Failure] = []
        self.served: dict[str, dict[str, Any]] = {}  # collection path -> name -> object (``serve``)
        self._versions = itertools.count(1)

    # -- collections kept in memory ------------------------------------------------------------
    def serve(self, collection: str, *objects: Any) -> dict[str, Any]:
        """Keep the objects of ``collection`` (e.g. /apis/apps/v1/namespaces/ns/controllerrevisions)
        in memory, starting with ``objects``; returns name -> object."""
        store = self.served.setdefault(collection, {})
        for o in objects:
            self._stamp(o)
            store[o["metadata"]["name"]] = copy.deepcopy(o)
        return store

    def _stamp(self, obj: Any) -> None:
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self._versions))
        meta.setdefault("creationTimestamp", "2025-01-01T00:00:00Z")
        meta.setdefault("uid", f"uid-{meta['resourceVersion']}")

    def _where(self, path: str) -> tuple[dict[str, Any], str | None] | None:
        for collection, store in self.served.items():
            if path == collection:
                return store, None
            if path.startswith(collection + "/"):
                return store, path[len(collection) + 1:]
        return None

    @staticmethod
    def _selected(obj: Any, selector: str | None) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for term in (selector or "").split(","):
            if not term:
                continue
            key, eq, value = term.partition("=")
            if key not in labels or (eq and labels[key] != value):
                return False
        return True

    def _serve(self, method: str, path: str, body: Any = None, params: dict | None = None) -> Any:
        store, name = self._where(path)
        if name is None and method == "get":
            sel = (params or {}).get("labelSelector")
            return {"items": [copy.deepcopy(o) for o in store.values() if self._selected(o, sel)],
                    "metadata": {"resourceVersion": str(next(self._versions))}}
        if name is None and method == "post":
            obj = copy.deepcopy(body)
            key = obj["metadata"]["name"]
            if key in store:
                raise ApiError(409, {"kind": "Status", "code": 409, "reason": "AlreadyExists",
                                     "message": f"{key} already exists"}, "POST", path)
            self._stamp(obj)
            store[key] = obj
            return copy.deepcopy(obj)
        if name not in store:
            raise ApiError(404, {"kind": "Status", "code": 404, "reason": "NotFound",
                                 "message": f"{name} not found"}, method.upper(), path)
        if method == "get":
            return copy.deepcopy(store[name])
        if method == "delete":
            return store.pop(name)
        if method in ("merge_patch", "patch"):
            obj = store[name] = _merge(store[name], body)
        elif method == "put":
            want = (body.get("metadata") or {}).get("resourceVersion")
            if want and want != store[name]["metadata"]["resourceVersion"]:
                raise ApiError(409, {"kind": "Status", "code": 409, "reason": "Conflict",
                                     "message": "the object has been modified"}, "PUT", path)
            obj = store[name] = copy.deepcopy(body)
        else:
            raise AssertionError(f"{method} not served")
        self._stamp(obj)
        return copy.deepcopy(obj)

    def fail(self, method: str, status: int, body: Any = None, *, path_contains: str = "",
             times: int | None = None) -> None:
        """Make calls of ``method`` (whose path contains ``path_contains``) raise
        ``ApiError(status, body)``: the next ``times`` ones, or all of them."""
        if body is None:
            body = {"kind": "Status", "code": status, "message": f"injected HTTP {status}"}
        self._failures.append(_Failure(method, path_contains, status, body, times))

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def _record(self, method: str, path: str, body: Any = None) -> None:
        self.calls.append(Call(method, path, body))
        for f in self._failures:
            if f.method == method and f.path_contains in path and (f.times is None or f.times > 0):
                if f.times is not None:
                    f.times -= 1
                raise ApiError(f.status, f.body, method.upper(), path)

    async def request(self, method: str, path: str, body: Any = None, **kw) -> Any:
        self._record(method.lower(), path, body)
        if self._where(path) is not None:
            return self._serve(method.lower(), path, body, kw.get("params"))
        return body

    async def get(self, path: str, **params) -> Any:
        self._record("get", path, params or None)
        if self._where(path) is not None:
            return self._serve("get", path, params=params)
        return self.objects.get(path, {"items": []})

    async def post(self, path: str, body: Any, fence: Any = None) -> Any:
        self._record("post", path, body)
        if self._where(path) is not None:
            return self._serve("post", path, body)
        return body

    async def merge_patch(self, path: str, body: Any, fence: Any = None) -> Any:
        self._record("merge_patch", path, body)
        if self._where(path) is not None:
            return self._serve("merge_patch", path, body)
        return body

    async def strategic_patch(self, path: str, body: Any, fence: Any = None) -> Any:
        self._record("strategic_patch", path, body)
        return body

    async def bind(self, namespace: str, name: str, node: str, uid: str | None = None,
                   annotations: dict[str, str] | None = None, timeout: float | None = None,
                   fence: Any = None) -> None:
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        if annotations:
            meta["annotations"] = annotations
        self._record("bind", f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
                     {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                      "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    async def close(self) -> None:
        self._record("close", "")
        self.closed = True


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out
