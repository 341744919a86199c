"""framework/cycle/binding_cycle.py and waiting.py: Reserve, Permit with waiting pods, and the
binding cycle, as upstream's framework runtime (RunReservePlugins*, RunPermitPlugins, WaitOnPermit,
RunPreBindPreFlights and the nomination for expectation, RunPreBind/Bind/PostBind)."""

from __future__ import annotations

import asyncio

import pytest

from policy_scheduler.framework.cycle.binding_cycle import (NOMINATED_FOR_EXPECTATION, SKIP_PRE_BIND,
                                                            nominate_for_expectation, run_binding, run_permit,
                                                            run_pre_bind_pre_flights, run_reserve, run_unreserve,
                                                            wait_on_permit)
from policy_scheduler.policy.chain import build_chain
from policy_scheduler.framework.interface import (BindPlugin, CycleState, PermitPlugin, PodGone,
                                                  PostBindPlugin, PreBindPlugin, ReservePlugin)
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.registry import Registry
from policy_scheduler.framework.status import Code, Status
from policy_scheduler.framework.waiting import WaitingPods, go_duration
from support.handles import MemoryActions, state_handle

POD = parse_pod({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {"containers": [{"name": "c"}]}})


@pytest.mark.parametrize("seconds, text", [
    (1, "1s"), (0.5, "500ms"), (90, "1m30s"), (1.5, "1.5s"), (7200, "2h0m0s"), (900, "15m0s"), (0, "0s"),
])
def test_go_duration(seconds, text):
    assert go_duration(seconds) == text


def probe(name, calls, *, reserve=None, permit=None, pre_bind=None, bind=None, raise_at=None):
    """A plugin at every binding point that logs ``(name, point)`` and answers as told."""

    class P(ReservePlugin, PermitPlugin, PreBindPlugin, BindPlugin, PostBindPlugin):
        NAME = name

        def _at(self, point):
            calls.append((name, point))
            if raise_at == point:
                raise RuntimeError(f"{point} broke")

        def reserve(self, state, pod, node):
            self._at("reserve")
            return reserve or Status.success()

        def unreserve(self, state, pod, node):
            self._at("unreserve")

        def permit(self, state, pod, node):
            self._at("permit")
            return permit or (Status.success(), 0.0)

        async def pre_bind(self, state, pod, node):
            self._at("preBind")
            return pre_bind or Status.success()

        async def bind(self, state, pod, node):
            self._at("bind")
            return bind or Status.skip()

        def post_bind(self, state, pod, node):
            self._at("postBind")
    return P


def chain(*plugins):
    reg = Registry()
    for p in plugins:
        reg.register(p)
    return build_chain({"plugins": [{"name": p.NAME} for p in plugins]}, reg)


def test_reserve_stops_at_the_first_failure_and_unreserve_runs_all_in_reverse():
    calls = []
    c = chain(probe("A", calls), probe("B", calls, reserve=Status.unschedulable("no room")), probe("C", calls))
    st = run_reserve(c, CycleState(), POD, "n")
    assert st.code == Code.UNSCHEDULABLE and st.plugin == "B" and st.reasons == ("no room",)
    run_unreserve(c, CycleState(), POD, "n")
    # C's reserve never ran, yet its unreserve does (upstream: unreserve must be idempotent)
    assert calls == [("A", "reserve"), ("B", "reserve"),
                     ("C", "unreserve"), ("B", "unreserve"), ("A", "unreserve")]


def test_reserve_error_and_exception_name_the_plugin():
    c = chain(probe("A", [], reserve=Status.error("disk full")))
    st = run_reserve(c, CycleState(), POD, "n")
    assert st.code == Code.ERROR and st.message() == 'running Reserve plugin "A": disk full'
    c = chain(probe("A", [], raise_at="reserve"))
    assert run_reserve(c, CycleState(), POD, "n").message() == 'running Reserve plugin "A": RuntimeError: reserve broke'
    calls = []
    run_unreserve(chain(probe("A", calls, raise_at="unreserve"), probe("B", calls)), CycleState(), POD, "n")
    assert calls == [("B", "unreserve"), ("A", "unreserve")]  # an unreserve that raises does not stop the rest


def test_permit_rejects_in_the_plugins_name_and_errors_in_upstream_words():
    w = WaitingPods()
    c = chain(probe("A", [], permit=(Status.unschedulable("not now"), 0)))
    st = run_permit(c, CycleState(), POD, "n", w)
    assert st.code == Code.UNSCHEDULABLE and st.plugin == "A" and len(w) == 0
    c = chain(probe("A", [], permit=(Status.error("oops"), 0)))
    assert run_permit(c, CycleState(), POD, "n", w).message() == 'running Permit plugin "A": oops'


def test_permit_wait_then_allow_by_every_waiting_plugin():
    async def go():
        w = WaitingPods()
        c = chain(probe("A", [], permit=(Status(Code.WAIT), 10)), probe("B", [], permit=(Status(Code.WAIT), 10)))
        st = run_permit(c, CycleState(), POD, "n", w)
        assert st.code == Code.WAIT and w.get("u1").pending_plugins() == ["A", "B"]
        task = asyncio.ensure_future(wait_on_permit(w, POD))
        await asyncio.sleep(0)
        w.get("u1").allow("A")
        await asyncio.sleep(0)
        assert not task.done()
        w.get("u1").allow("B")
        assert (await task).is_success and len(w) == 0
    asyncio.run(go())


def test_permit_timeout_and_reject_of_a_waiting_pod():
    async def go():
        w = WaitingPods()
        c = chain(probe("Gang", [], permit=(Status(Code.WAIT), 0.05)))
        run_permit(c, CycleState(), POD, "n", w)
        st = await wait_on_permit(w, POD)
        assert st.code == Code.UNSCHEDULABLE and st.plugin == "Gang"
        assert st.message() == "rejected due to timeout after waiting 50ms at plugin Gang"
        run_permit(c, CycleState(), POD, "n", w)
        assert w.reject("u1", "Gang", "the gang fell apart")
        st = await wait_on_permit(w, POD)
        assert st.message() == "the gang fell apart" and st.plugin == "Gang"
        assert not w.reject("u1", "Gang", "again")  # gone from the map once waited on
    asyncio.run(go())


def test_binding_cycle_order_and_first_binder_that_does_not_skip_binds():
    calls = []
    c = chain(probe("A", calls), probe("B", calls, bind=Status.success()), probe("C", calls))
    st = asyncio.run(run_binding(c, CycleState(), POD, "n", WaitingPods()))
    assert st.is_success
    assert calls == [("A", "preBind"), ("B", "preBind"), ("C", "preBind"), ("A", "bind"), ("B", "bind"),
                     ("A", "postBind"), ("B", "postBind"), ("C", "postBind")]


def test_binding_cycle_failures():
    st = asyncio.run(run_binding(chain(probe("A", [])), CycleState(), POD, "n", WaitingPods()))
    assert st.code == Code.ERROR and "every Bind plugin returned Skip" in st.message()
    calls = []
    c = chain(probe("A", calls, pre_bind=Status.error("volume not ready"), bind=Status.success()))
    st = asyncio.run(run_binding(c, CycleState(), POD, "n", WaitingPods()))
    assert st.message() == 'running PreBind plugin "A": volume not ready' and st.plugin == "A"
    assert calls == [("A", "preBind")]  # no Bind, no PostBind after a failed PreBind
    c = chain(probe("A", [], bind=Status.error("refused")))
    assert asyncio.run(run_binding(c, CycleState(), POD, "n", WaitingPods())).message() == \
        'running Bind plugin "A": refused'

    class Gone(BindPlugin):
        NAME = "Gone"

        async def bind(self, state, pod, node):
            raise PodGone("already bound")

    with pytest.raises(PodGone):
        asyncio.run(run_binding(chain(Gone), CycleState(), POD, "n", WaitingPods()))


# ------------------------------------------------------------------ PreBindPreFlight and the nomination
# for expectation (upstream RunPreBindPreFlights and the start of bindingCycle, KEP-5278)

def nominating_handle(fail=False):
    """The real handle; the nominations for expectation it writes are in ``h.actions.nominated``;
    ``fail``: the write raises."""
    return state_handle(actions=MemoryActions(nominate_error=RuntimeError("apiserver down") if fail else None))


def flight(name, calls, answer):
    """A PreBind plugin with a PreBindPreFlight answering ``answer`` (a Status, or an exception
    to raise)."""

    class F(PreBindPlugin):
        NAME = name

        def pre_bind_pre_flight(self, state, pod, node):
            calls.append((name, "preFlight"))
            if isinstance(answer, Exception):
                raise answer
            return answer

        async def pre_bind(self, state, pod, node):
            calls.append((name, "preBind"))
            return Status.success()
    return F


def chain_with(handle, *plugins):
    reg = Registry()
    for p in plugins:
        reg.register(p)
    return build_chain({"plugins": [{"name": p.NAME} for p in plugins]}, reg, handle)


def test_pre_flights_success_when_any_plugin_has_work_and_skipped_pre_binds_do_not_run():
    calls = []
    c = chain(flight("A", calls, Status.skip()), flight("B", calls, Status.success()),
              probe("C", calls, bind=Status.success()))
    state = CycleState()
    st = run_pre_bind_pre_flights(c, state, POD, "n")
    assert st.is_success and state.read(SKIP_PRE_BIND) == {"A"}
    # C has no PreBindPreFlight: it counts as Skip for the nomination, yet its PreBind runs
    assert asyncio.run(run_binding(c, state, POD, "n", WaitingPods())).is_success
    assert calls == [("A", "preFlight"), ("B", "preFlight"), ("B", "preBind"), ("C", "preBind"),
                     ("C", "bind"), ("C", "postBind")]


def test_pre_flights_skip_when_no_plugin_has_work():
    calls = []
    c = chain(flight("A", calls, Status.skip()), probe("C", calls))
    assert run_pre_bind_pre_flights(c, CycleState(), POD, "n").is_skip
    assert run_pre_bind_pre_flights(chain(probe("C", [])), CycleState(), POD, "n").is_skip


@pytest.mark.parametrize("answer, message", [
    (Status.error("state gone"), 'running PreBindPreFlight "A": state gone'),
    (RuntimeError("boom"), 'running PreBindPreFlight "A": RuntimeError: boom'),
    (Status.unschedulable("no"), 'PreBindPreFlight A returned "Unschedulable", which is unsupported. '
                                 'It is supposed to return Success, Skip, or Error status'),
    (Status(Code.WAIT), 'PreBindPreFlight A returned "Wait", which is unsupported. '
                        'It is supposed to return Success, Skip, or Error status'),
])
def test_pre_flight_failures_are_errors_in_upstream_words(answer, message):
    calls = []
    c = chain(flight("A", calls, answer), flight("B", calls, Status.success()))
    st = run_pre_bind_pre_flights(c, CycleState(), POD, "n")
    assert st.code == Code.ERROR and st.message() == message and st.plugin == "A"
    assert calls == [("A", "preFlight")]  # the first failure ends the run


def test_nomination_for_expectation_only_when_pre_bind_has_work_or_the_pod_waits():
    async def go(answer, wait, nominated=""):
        h = nominating_handle()
        plugins = [flight("A", [], answer)] + ([probe("W", [], permit=(Status(Code.WAIT), 10))] if wait else [])
        c = chain_with(h, *plugins)
        w = WaitingPods()
        pod = parse_pod({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
                         "spec": {"containers": [{"name": "c"}]}, "status": {"nominatedNodeName": nominated}})
        state = CycleState()
        if wait:
            assert run_permit(c, state, pod, "n", w).code == Code.WAIT
        st = await nominate_for_expectation(c, state, pod, "n", w)
        return st, h.actions.nominated, state.read(NOMINATED_FOR_EXPECTATION)

    # PreBind has work: nominated, before any WaitOnPermit or PreBind
    assert asyncio.run(go(Status.success(), False)) == (Status.success(), [("p", "n")], "n")
    # no PreBind work and no Permit wait: no write (the pod is bound soon anyway)
    assert asyncio.run(go(Status.skip(), False)) == (Status.skip(), [], None)
    # waiting at Permit: nominated although no PreBind has work
    assert asyncio.run(go(Status.skip(), True)) == (Status.skip(), [("p", "n")], "n")
    # already nominated to that node: nothing to write (upstream updatePod)
    assert asyncio.run(go(Status.success(), False, nominated="n")) == (Status.success(), [], "n")
    # a failed PreBindPreFlight fails the binding with no write, and drops the Permit wait
    st, written, at = asyncio.run(go(Status.error("x"), True))
    assert st.code == Code.ERROR and written == [] and at is None


def test_a_failed_nomination_write_is_only_logged(caplog):
    h = nominating_handle(fail=True)
    c = chain_with(h, flight("A", [], Status.success()))
    st = asyncio.run(nominate_for_expectation(c, CycleState(), POD, "n", WaitingPods()))
    assert st.is_success and h.actions.nominated == [("p", "n")]
    assert "Failed to update the nominated node name in the binding cycle" in caplog.text
