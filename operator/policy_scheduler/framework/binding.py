"""The binding side of the cycle: Reserve, Permit (with waiting pods), then, asynchronously,
WaitOnPermit, PreBind, Bind and PostBind, as upstream's framework/runtime and schedule_one.go.

The scheduling loop calls ``run_reserve`` and ``run_permit`` right after it assumed the pod on
the chosen node (synchronously, so the next pod already sees the reservation). The engine then
starts ``run_binding`` as a task. Whoever sees a failure calls ``run_unreserve`` (every Reserve
plugin, in reverse order), forgets the assumption and requeues the pod; the statuses returned
here say who failed and why, in upstream's words (``running Reserve plugin "X": ...``).

No I/O here: Bind plugins reach the API server only through ``Handle.bind_pod``.
"""

from __future__ import annotations

import logging
from time import perf_counter
from typing import TYPE_CHECKING

from .instrumentation import BIND, PERMIT, POST_BIND, PRE_BIND, RESERVE, UNRESERVE
from .interface import CycleState, PodGone
from .status import Code, Status
from .waiting import WaitingPod, WaitingPods  # WaitingPods: re-exported for cluster/ and whatif/

if TYPE_CHECKING:  # pragma: no cover
    from .chain import Chain
    from .podinfo import PodInfo

log = logging.getLogger(__name__)

MAX_PERMIT_TIMEOUT = 15 * 60.0  # upstream maxTimeout
BINDING_ANNOTATIONS = "policy-scheduler.io/binding-annotations"  # CycleState key: annotations the Binding sets


def _error(point: str, plugin: str, st_or_exc) -> Status:
    if isinstance(st_or_exc, Status):
        detail = st_or_exc.message() or str(st_or_exc.code)
    else:
        detail = f"{type(st_or_exc).__name__}: {st_or_exc}"
    return Status.error(f'running {point} plugin "{plugin}": {detail}', plugin)


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
    sampled = rec.sampled
    for p in chain.reserve:
        t = perf_counter() if sampled else 0.0
        try:
            st = p.reserve(state, pod, node)
        except Exception as e:
            log.exception("Reserve plugin %s failed on pod %s", p.NAME, pod.key)
            st = _error("Reserve", p.NAME, e)
            if sampled:
                rec.plugin(p.NAME, RESERVE, Code.ERROR, perf_counter() - t)
            return st
        if sampled:
            rec.plugin(p.NAME, RESERVE, st.code, perf_counter() - t)
        if st.is_success:
            continue
        if st.is_rejected:
            return st.with_plugin(p.NAME)
        return _error("Reserve", p.NAME, st)
    return Status.success()


def run_unreserve(chain: "Chain", state: CycleState, pod: "PodInfo", node: str) -> None:
    """Every Reserve plugin's unreserve, in reverse order; errors are logged, never raised."""
    rec = state.recorder
    sampled = rec.sampled
    t0 = perf_counter()
    for p in reversed(chain.reserve):
        t = perf_counter() if sampled else 0.0
        try:
            p.unreserve(state, pod, node)
        except Exception:
            log.exception("Unreserve of plugin %s failed on pod %s", p.NAME, pod.key)
        if sampled:  # upstream reports Success for every Unreserve call
            rec.plugin(p.NAME, UNRESERVE, Code.SUCCESS, perf_counter() - t)
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
    sampled = rec.sampled
    timeouts: dict[str, float] = {}
    for p in chain.permit:
        t = perf_counter() if sampled else 0.0
        try:
            st, timeout = p.permit(state, pod, node)
        except Exception as e:
            log.exception("Permit plugin %s failed on pod %s", p.NAME, pod.key)
            if sampled:
                rec.plugin(p.NAME, PERMIT, Code.ERROR, perf_counter() - t)
            return _error("Permit", p.NAME, e)
        if sampled:
            rec.plugin(p.NAME, PERMIT, st.code, perf_counter() - t)
        if st.is_success:
            continue
        if st.is_rejected:
            return st.with_plugin(p.NAME)
        if st.code == Code.WAIT:
            timeouts[p.NAME] = min(max(float(timeout), 0.0), MAX_PERMIT_TIMEOUT)
            continue
        return _error("Permit", p.NAME, st)
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


async def _guarded(point: str, plugin: str, pod: "PodInfo", call, state: CycleState | None = None) -> Status:
    """Await a bind-side plugin call: Success or Skip as they are; anything else, or an
    exception (other than PodGone), becomes an Error naming the plugin. In a sampled cycle
    (``state``'s recorder) the call is timed, with the plugin's own status code."""
    rec = state.recorder if state is not None else None
    sampled = rec is not None and rec.sampled
    t = perf_counter() if sampled else 0.0
    try:
        st = await call
    except PodGone:
        raise
    except Exception as e:
        log.exception("%s plugin %s failed on pod %s", point, plugin, pod.key)
        if sampled:
            rec.plugin(plugin, point, Code.ERROR, perf_counter() - t)
        return _error(point, plugin, e)
    if sampled:
        rec.plugin(plugin, point, st.code, perf_counter() - t)
    return st if st.is_success or st.is_skip else _error(point, plugin, st)


async def run_binding(chain: "Chain", state: CycleState, pod: "PodInfo", node: str,
                      waiting: WaitingPods) -> Status:
    """WaitOnPermit, PreBind, Bind (the first plugin that does not Skip binds), PostBind.
    Returns Success, a Permit rejection, or an Error naming the plugin. Raises PodGone when the
    binder found the pod bound or deleted meanwhile. The caller unreserves on failure."""
    st = await wait_on_permit(waiting, pod)
    if not st.is_success:
        return st
    rec = state.recorder
    sampled = rec.sampled
    t0 = perf_counter()
    for p in chain.pre_bind:
        st = await _guarded(PRE_BIND, p.NAME, pod, p.pre_bind(state, pod, node), state)
        if st.code == Code.ERROR:
            rec.point(PRE_BIND, st.code, perf_counter() - t0)
            return st
    t1 = perf_counter()
    rec.point(PRE_BIND, Code.SUCCESS, t1 - t0)
    bound = False
    try:
        for p in chain.bind:
            st = await _guarded(BIND, p.NAME, pod, p.bind(state, pod, node), state)
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
    for p in chain.post_bind:
        t = perf_counter() if sampled else 0.0
        try:
            p.post_bind(state, pod, node)
        except Exception:  # informational: a failing PostBind does not undo the binding
            log.exception("PostBind plugin %s failed on pod %s", p.NAME, pod.key)
        if sampled:  # upstream reports Success for every PostBind call
            rec.plugin(p.NAME, POST_BIND, Code.SUCCESS, perf_counter() - t)
    rec.point(POST_BIND, Code.SUCCESS, perf_counter() - t2)
    return Status.success()
