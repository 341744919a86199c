"""The plugin tests' Handles: the real one (cache/handle.py's StateHandle) over an in-memory
ClusterState, as the operator and what-if build it. What a plugin reads comes from the state (fed
through its own caches and dicts, or ``ClusterState.apply_*``); what a plugin writes goes through
``MemoryActions``, the operator's ``Actions`` (cluster/apicalls.py) kept in memory.

``MemoryActions`` answers as the framework's Handle does when nothing is wired (no binding, no
API requests, nothing activated, spawned coroutines closed) and records what it is asked; a test
that needs other answers passes them (``api``, ``bind``, ``activate``, ``spawn``) or subclasses it.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Iterable, Mapping

from policy_scheduler.cache.handle import StateHandle
from policy_scheduler.cache.state import ClusterState
from policy_scheduler.framework.metricview import SOURCE
from policy_scheduler.framework.status import Status


class MemoryActions:
    """cache/handle.Actions in memory. Recorded: ``events`` (pod name, reason, message),
    ``activated`` (the keys of each call, sorted), ``nominated`` (pod name, node), ``binds``
    (pod name, node), ``spawned`` (coroutines kept when ``spawn``), ``group_status``
    (namespace, name, status). ``api``: an async ``(method, path, body)`` answering API requests
    (default: none can be made); ``activate``: activate_pods answers how many it was given (default
    0); ``spawn``: keep spawned coroutines (default: closed); ``bind``: bind_pod's answer (default:
    an Error); ``nominate_error``: raised by nominate_for_expectation after recording it."""

    def __init__(self, api: Callable[..., Any] | None = None, activate: bool = False, spawn: bool = False,
                 bind: Status | None = None, nominate_error: Exception | None = None) -> None:
        self.api = api
        self.nominate_error = nominate_error
        self.activate = activate
        self.keep_spawned = spawn
        self.bind_answer = bind
        self.events: list[tuple[str, str, str]] = []
        self.normal_events: list[tuple[str, str, str]] = []
        self.activated: list[list[str]] = []
        self.nominated: list[tuple[str, str]] = []
        self.binds: list[tuple[str, str]] = []
        self.spawned: list[Any] = []
        self.group_status: list[tuple[str, str, Mapping[str, Any]]] = []

    async def bind_pod(self, pod, node_name: str, annotations: Mapping[str, str]) -> Status:
        self.binds.append((pod.name, node_name))
        return self.bind_answer if self.bind_answer is not None else Status.error("this handle cannot bind pods")

    async def api_request(self, method: str, path: str, body: Any = None) -> Any:
        if self.api is None:
            raise NotImplementedError("this handle cannot make API requests")
        return await self.api(method, path, body)

    async def nominate_for_expectation(self, pod, node_name: str) -> None:
        self.nominated.append((pod.name, node_name))
        if self.nominate_error is not None:
            raise self.nominate_error

    async def patch_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self.group_status.append((namespace, name, status))

    async def patch_native_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self.group_status.append((namespace, name, status))

    def activate_pods(self, keys: Iterable[str]) -> int:
        keys = list(keys)
        self.activated.append(sorted(keys))
        return len(keys) if self.activate else 0

    def pod_event(self, pod, reason: str, message: str) -> None:
        self.events.append((pod.name, reason, message))

    def pod_normal_event(self, pod, reason: str, message: str) -> None:
        self.normal_events.append((pod.name, reason, message))

    def is_pod_running_preemption(self, uid: str) -> bool:
        return False

    def spawn(self, coro: Any) -> None:
        if self.keep_spawned:
            self.spawned.append(coro)
        else:
            coro.close()


def state_handle(state: ClusterState | None = None, actions: Any = None, **kw) -> StateHandle:
    """A StateHandle over ``state`` (a fresh ClusterState by default) writing through ``actions``
    (None: the framework's defaults, as what-if's)."""
    return StateHandle(state if state is not None else ClusterState(), actions=actions, **kw)


class OneView:
    """What StateHandle asks of the metric sources for its policy: ``view`` (a MetricsView)."""

    def __init__(self, view: Any) -> None:
        self._view = view

    def view(self, policy: str) -> Any:
        return self._view


def view_handle(view: Any) -> StateHandle:
    """The handle of policy ``p``, whose metric source (``metricview.SOURCE``) is ``view``."""
    h = state_handle(sources=OneView(view), policy="p")
    assert h.source(SOURCE) is view
    return h


def overcommit_handle(factors: Mapping[str, float], anywhere: bool = True) -> StateHandle:
    """The handle of policy ``p`` with spec.overcommit ``factors``, as the policy store answers
    it; ``anywhere``: some policy overcommits (another one, when ``factors`` is empty)."""
    policies = {"p": SimpleNamespace(overcommit=dict(factors))}
    if anywhere and not factors:
        policies["other"] = SimpleNamespace(overcommit={"cpu": 1.5})
    return state_handle(store=SimpleNamespace(policies=policies), policy="p")


def namespaces_handle(namespaces: Mapping[str, Mapping[str, str]] | None = None) -> StateHandle:
    """A handle whose namespaces have these labels (name -> labels)."""
    state = ClusterState()
    for name, labels in (namespaces or {}).items():
        state.apply_namespace("ADDED", {"metadata": {"name": name, "labels": dict(labels)}})
    return state_handle(state)


def pdbs_handle(pdbs: Iterable[Any] = ()) -> StateHandle:
    """A handle whose PodDisruptionBudgets are ``pdbs`` (``framework.preemption.PDB`` values, in order)."""
    state = ClusterState()
    for i, pdb in enumerate(pdbs):
        state.pdbs[f"pdb/{i}"] = pdb
    return state_handle(state)
