"""An in-memory stand-in for cluster/kubeclient.KubeClient: the async methods the engine, the
event recorder and the status writer call, each recorded in ``calls``; ``fail`` makes calls
raise an ApiError, as the API server would answer."""

from __future__ import annotations

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
        return body

    async def get(self, path: str, **params) -> Any:
        self._record("get", path, params or None)
        return self.objects.get(path, {"items": []})

    async def post(self, path: str, body: Any) -> Any:
        self._record("post", path, body)
        return body

    async def merge_patch(self, path: str, body: Any) -> Any:
        self._record("merge_patch", path, body)
        return body

    async def strategic_patch(self, path: str, body: Any) -> Any:
        self._record("strategic_patch", path, body)
        return body

    async def bind(self, namespace: str, name: str, node: str, uid: str | None = None,
                   annotations: dict[str, str] | None = None, timeout: float | None = None) -> None:
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
