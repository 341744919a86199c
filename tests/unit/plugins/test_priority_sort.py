"""PrioritySort: higher priority first, then earlier queue timestamp."""

from functools import cmp_to_key
from types import SimpleNamespace

from support import kit
import pytest

from policy_scheduler.framework.interface import Handle
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.plugins.priority_sort import PLUGIN


def queued(name, priority=None, timestamp=0.0, created="2024-01-01T00:00:00Z"):
    spec = {"containers": [{"name": "c"}]}
    if priority is not None:
        spec["priority"] = priority
    pod = parse_pod({"metadata": {"name": name, "namespace": "default", "creationTimestamp": created},
                     "spec": spec})
    return SimpleNamespace(pod=pod, timestamp=timestamp)


LESS = PLUGIN(None, Handle()).less


@pytest.mark.parametrize("a, b, a_first, b_first", [
    pytest.param(queued("a", 10, 5.0), queued("b", 1, 1.0), True, False, id="higher-priority-wins-over-time"),
    pytest.param(queued("a", 1, 1.0), queued("b", 1, 2.0), True, False, id="equal-priority-earlier-first"),
    pytest.param(queued("a", 1, 1.0), queued("b", 1, 1.0), False, False, id="full-tie"),
    pytest.param(queued("a", None, 1.0), queued("b", -5, 0.0), True, False, id="unset-priority-is-zero"),
    pytest.param(queued("a", None, 2.0), queued("b", 0, 1.0), False, True, id="unset-equals-zero"),
    pytest.param(queued("a", 0, 1.0, created="2030-01-01T00:00:00Z"),
                 queued("b", 0, 2.0, created="2020-01-01T00:00:00Z"), True, False,
                 id="queue-time-not-creation-time"),
])
def test_less(a, b, a_first, b_first):
    assert LESS(a, b) is a_first
    assert LESS(b, a) is b_first


def test_sorts_a_queue():
    items = [queued("low-old", 0, 1.0), queued("high-new", 100, 9.0), queued("low-new", 0, 5.0),
             queued("mid", 50, 3.0), queued("high-old", 100, 2.0)]
    order = sorted(items, key=cmp_to_key(lambda x, y: -1 if LESS(x, y) else (1 if LESS(y, x) else 0)))
    assert [i.pod.name for i in order] == ["high-old", "high-new", "mid", "low-old", "low-new"]


# ------------------------------------------------------------------ args
@pytest.mark.parametrize("args", [{"x": 1}, {"weight": 2}])
def test_takes_no_args(args):
    kit.assert_takes_no_args(PLUGIN.NAME, args)
