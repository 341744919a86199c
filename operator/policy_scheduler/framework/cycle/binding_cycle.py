"""The binding side of the cycle: Reserve, Permit (with waiting pods), then, asynchronously,
PreBindPreFlight (and the nomination for expectation), WaitOnPermit, PreBind, Bind and PostBind,
as upstream's framework/runtime and schedule_one.go.

The scheduling loop calls ``run_reserve`` and ``run_permit`` right after it assumed the pod on
the chosen node (synchronously, so the next pod already sees the reservation). The engine then
starts ``run_binding`` as a task. Whoever sees a failure calls ``run_unreserve`` (every Reserve
plugin, in reverse order), forgets the assumption and requeues the pod; the statuses returned
here say who failed and why, in upstream's words (``running Reserve plugin "X": ...``). The
plugins are called, timed and their errors worded by runtime.py.

No I/O here: Bind plugins reach the API server only through ``Handle.bind_pod``, and the
nomination for expectation goes through ``Handle.nominate_for_expectation``.
"""

from __future__ import annotations

import logging
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

log = logging.getLogger("policy_scheduler")

MAX_PERMIT_TIMEOUT = 15 * 60.0  # upstream maxTimeout
BINDING_ANNOTATIONS = "policy-scheduler.io/binding-annotations"  # CycleState key: annotations the Binding sets
# CycleState keys of the binding cycle: the PreBind plugins whose PreBindPreFlight returned Skip
# (their PreBind is not called; upstream SetSkipPreBindPlugins), and the node the pod's
# status.nominatedNodeName was written to before WaitOnPermit (None: not written)
SKIP_PRE_BIND = "policy-scheduler.io/skip-pre-bind"
NOMINATED_FOR_EXPECTATION = "policy-scheduler.io/nominated-for-expectation"
PRE_BIND_PRE_FLIGHT = "PreBindPreFlight"


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


def run_pre_bind_pre_flights(chain: "Chain", state: CycleState, pod: "PodInfo", node: str) -> Status:
    """upstream RunPreBindPreFlights: every PreBind plugin's PreBindPreFlight, in chain order.
    Success when at least one returned Success (some PreBind has work for this pod); Skip when
    none did; an Error (``running PreBindPreFlight "X": ...``) on the first plugin that failed or
    answered anything but Success, Skip or Error. The plugins that returned Skip are recorded in
    ``state`` (SKIP_PRE_BIND): run_binding does not call their PreBind. A plugin without a
    PreBindPreFlight (upstream has none: every PreBind plugin implements it) counts as Skip here
    but its PreBind still runs."""
    result = Status.skip()
    skipped: set[str] = set()
    for p in chain.pre_bind:
        fn = getattr(p, "pre_bind_pre_flight", None)
        if fn is None:
            continue
        try:
            st = fn(state, pod, node)
        except PodGone:
            raise
        except Exception as e:  # noqa: BLE001 - a plugin's failure is its status
            log.error("%s plugin %s failed on pod %s", PRE_BIND_PRE_FLIGHT, p.NAME, pod.key, exc_info=e)
            return Status.error(f'running {PRE_BIND_PRE_FLIGHT} "{p.NAME}": {type(e).__name__}: {e}', p.NAME)
        if st.code == Code.ERROR:
            return Status.error(f'running {PRE_BIND_PRE_FLIGHT} "{p.NAME}": {st.message() or st.code}', p.NAME)
        if st.is_success:
            result = Status.success()
        elif st.is_skip:
            skipped.add(p.NAME)
        else:
            return Status.error(f'{PRE_BIND_PRE_FLIGHT} {p.NAME} returned "{st.code}", which is unsupported. '
                                f"It is supposed to return Success, Skip, or Error status", p.NAME)
    state.write(SKIP_PRE_BIND, skipped)
    return result


def will_wait_on_permit(waiting: WaitingPods, pod: "PodInfo") -> bool:
    """upstream WillWaitOnPermit: the pod is parked at Permit (until WaitOnPermit takes it out,
    even when every plugin has allowed it meanwhile)."""
    return waiting.get(pod.uid) is not None


def _handle(chain: "Chain"):
    """The Handle the chain's plugins were built with (one per chain); None for an empty chain."""
    for p in chain.plugins:
        h = getattr(p, "handle", None)
        if h is not None:
            return h
    return None


async def nominate_for_expectation(chain: "Chain", state: CycleState, pod: "PodInfo", node: str,
                                   waiting: WaitingPods) -> Status:
    """The start of upstream's bindingCycle (NominatedNodeNameForExpectation, on by default):
    the PreBindPreFlights, then, when a PreBind plugin has work for the pod or the pod waits at
    Permit, its ``status.nominatedNodeName`` set to ``node`` through the Handle (awaited, so it
    comes before WaitOnPermit, PreBind and the Binding; a failed write is only logged). A pod
    already nominated there is not written again (upstream updatePod). Returns the
    PreBindPreFlights' status: an Error fails the binding (the caller unreserves)."""
    st = run_pre_bind_pre_flights(chain, state, pod, node)
    if st.code == Code.ERROR or st.is_rejected:
        waiting.remove(pod.uid)  # no WaitOnPermit will take it out: the binding fails here
        return st
    if st.is_success or will_wait_on_permit(waiting, pod):
        state.write(NOMINATED_FOR_EXPECTATION, node)
        handle = _handle(chain)
        if handle is not None and pod.nominated_node_name != node:
            try:
                await handle.nominate_for_expectation(pod, node)
            except PodGone:
                raise
            except Exception as e:  # noqa: BLE001 - upstream: not critical enough to stop the binding
                log.error("Failed to update the nominated node name in the binding cycle: pod %s, "
                          "nominatedNodeName %s: %s", pod.key, node, e)
    return st


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
    """WaitOnPermit, PreBind (but for the plugins whose PreBindPreFlight returned Skip), Bind
    (the first plugin that does not Skip binds), PostBind.
    Returns Success, a Permit rejection, or an Error naming the plugin. Raises PodGone when the
    binder found the pod bound or deleted meanwhile. The caller unreserves on failure."""
    st = await wait_on_permit(waiting, pod)
    if not st.is_success:
        return st
    rec = state.recorder
    t0 = perf_counter()
    skipped = state.read(SKIP_PRE_BIND) or ()
    for p in chain.pre_bind:
        if p.NAME in skipped:  # its PreBindPreFlight said it has nothing to do
            continue
        st = await _guarded(PRE_BIND, p.NAME, p.pre_bind, state, pod, node)
        if st.code == Code.ERROR:
            rec.point(PRE_BIND, st.code, perf_counter() - t0)
            return st
    t1 = perf_counter()
    rec.point(PRE_BIND, Code.SUCCESS, t1 - t0)
    bound = False
    try:
        for bp in chain.bind:
            st = await _guarded(BIND, bp.NAME, bp.bind, state, pod, node)
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
    for pb in chain.post_bind:  # informational: a failing PostBind does not undo the binding
        call_informational(rec, pb.NAME, POST_BIND, pb.post_bind, state, pod, node, log_key=pod.key)
    rec.point(POST_BIND, Code.SUCCESS, perf_counter() - t2)
    return Status.success()
