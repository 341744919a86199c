"""The binding side of the cycle: Reserve, Permit (with waiting pods), then, asynchronously,
WaitOnPermit, PreBind, Bind and PostBind, as upstream's framework/runtime and schedule_one.go.

The scheduling loop calls ``run_reserve`` and ``run_permit`` right after it assumed the pod on
the chosen node (synchronously, so the next pod already sees the reservation). The engine then
starts ``run_binding`` as a task. Whoever sees a failure calls ``run_unreserve`` (every Reserve
plugin, in reverse order), forgets the assumption and requeues the pod; the statuses returned
here say who failed and why, in upstream's words (``running Reserve plugin "X": ...``). The
plugins are called, timed and their errors worded by runtime.py.

No I/O here: Bind plugins reach the API server only through ``Handle.bind_pod``.
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING

from ..instrumentation import BIND, PERMIT, POST_BIND, PRE_BIND, RESERVE, UNRESERVE
from ..interface import CycleState, PodGone
from .runtime import Abort, call, call_async, call_informational, first_code, plugin_error, settle, status_code
from ..status import Code, Status
from ..waiting import WaitingPod, WaitingPods  # WaitingPods: re-exported for cluster/ and whatif/

if TYPE_CHECKING:  # pragma: no cover
    from .chain import Chain
    from ..model.podinfo import PodInfo

MAX_PERMIT_TIMEOUT = 15 * 60.0  # upstream maxTimeout
BINDING_ANNOTATIONS = "policy-scheduler.io/binding-annotations"  # CycleState key: annotations the Binding sets


# -------------------------------------------------------------------------------------- Reserve

def run_reserve(chain: "Chain", state: CycleState, pod: "PodInfo", node: str) -> Status:
    """Every Reserve plugin in order; the first failure stops the run (the caller unreserves).
    A rejection keeps its code and gets the plugin's name; anything else is an Error."""
    rec = state.recorder
    t0 = perf_counter()
    st = _reserve(chain, state, pod, node)
    rec.point(RESERVE, st.code, perf_counter() - t0)
    return st


def _reserve(chain: "Chain", state: CycleState, pod: "PodInfo", node: str) -> Status:
    rec = state.recorder
    for p in chain.reserve:
        try:
            st = call(rec, p.NAME, RESERVE, RESERVE, status_code, p.reserve, state, pod, node, log_key=pod.key)
        except Abort as a:
            return a.status
        if not st.is_success:
            return settle(RESERVE, p.NAME, st)
    return Status.success()


def run_unreserve(chain: "Chain", state: CycleState, pod: "PodInfo", node: str) -> None:
    """Every Reserve plugin's unreserve, in reverse order; errors are logged, never raised."""
    rec = state.recorder
    t0 = perf_counter()
    for p in reversed(chain.reserve):
        call_informational(rec, p.NAME, UNRESERVE, p.unreserve, state, pod, node, log_key=pod.key)
    rec.point(UNRESERVE, Code.SUCCESS, perf_counter() - t0)


# -------------------------------------------------------------------------------------- Permit

def run_permit(chain: "Chain", state: CycleState, pod: "PodInfo", node: str, waiting: WaitingPods) -> Status:
    """upstream RunPermitPlugins: Success; Wait (the pod is parked in ``waiting`` with each
    waiting plugin's timeout, capped at 15 minutes); a rejection in the plugin's name; or Error."""
    rec = state.recorder
    t0 = perf_counter()
    st = _permit(chain, state, pod, node, waiting)
    rec.point(PERMIT, st.code, perf_counter() - t0)
    return st


def _permit(chain: "Chain", state: CycleState, pod: "PodInfo", node: str, waiting: WaitingPods) -> Status:
    rec = state.recorder
    timeouts: dict[str, float] = {}
    for p in chain.permit:
        try:
            st, timeout = call(rec, p.NAME, PERMIT, PERMIT, first_code, p.permit, state, pod, node, log_key=pod.key)
        except Abort as a:
            return a.status
        if st.is_success:
            continue
        if st.code == Code.WAIT:
            timeouts[p.NAME] = min(max(float(timeout), 0.0), MAX_PERMIT_TIMEOUT)
            continue
        return settle(PERMIT, p.NAME, st)
    if timeouts:
        waiting.add(WaitingPod(pod, node, timeouts))
        return Status(Code.WAIT, (f"one or more plugins asked to wait and no plugin rejected pod {pod.name!r}",))
    return Status.success()


# -------------------------------------------------------------------------------------- binding cycle

async def wait_on_permit(waiting: WaitingPods, pod: "PodInfo") -> Status:
    wp = waiting.get(pod.uid)
    if wp is None:
        return Status.success()
    try:
        return await wp.wait()
    finally:
        waiting.remove(pod.uid)


async def _guarded(point: str, plugin: str, fn, state: CycleState, pod: "PodInfo", node: str) -> Status:
    """A bind-side plugin call, ``fn(state, pod, node)`` awaited: Success or Skip as they are;
    anything else, even a rejection, or an exception (other than PodGone), becomes an Error
    naming the plugin."""
    try:
        st = await call_async(state.recorder, plugin, point, fn, state, pod, node, log_key=pod.key)
    except Abort as a:
        return a.status
    return st if st.is_success or st.is_skip else plugin_error(point, plugin, st)


async def run_binding(chain: "Chain", state: CycleState, pod: "PodInfo", node: str,
                      waiting: WaitingPods) -> Status:
    """WaitOnPermit, PreBind, Bind (the first plugin that does not Skip binds), PostBind.
    Returns Success, a Permit rejection, or an Error naming the plugin. Raises PodGone when the
    binder found the pod bound or deleted meanwhile. The caller unreserves on failure."""
    st = await wait_on_permit(waiting, pod)
    if not st.is_success:
        return st
    rec = state.recorder
    t0 = perf_counter()
    for p in chain.pre_bind:
        st = await _guarded(PRE_BIND, p.NAME, p.pre_bind, state, pod, node)
        if st.code == Code.ERROR:
            rec.point(PRE_BIND, st.code, perf_counter() - t0)
            return st
    t1 = perf_counter()
    rec.point(PRE_BIND, Code.SUCCESS, t1 - t0)
    bound = False
    try:
        for p in chain.bind:
            st = await _guarded(BIND, p.NAME, p.bind, state, pod, node)
            if st.is_skip:
                continue
            if st.code == Code.ERROR:
                return st
            bound = True
            break
        if not bound:
            st = Status.error("no Bind plugin bound the pod: every Bind plugin returned Skip")
            return st
    except PodGone:
        st = Status(Code.ERROR)
        raise
    finally:
        rec.point(BIND, st.code, perf_counter() - t1)
    t2 = perf_counter()
    for p in chain.post_bind:  # informational: a failing PostBind does not undo the binding
        call_informational(rec, p.NAME, POST_BIND, p.post_bind, state, pod, node, log_key=pod.key)
    rec.point(POST_BIND, Code.SUCCESS, perf_counter() - t2)
    return Status.success()
