"""whatif/metrics.py: allocation shares, imbalance, zone spread and fragmentation, derived by hand."""

from __future__ import annotations

import numpy as np
import pytest

from policy_scheduler.whatif import metrics


def test_shares_are_zero_where_nothing_is_allocatable():
    s = metrics.shares(np.array([[500, 2], [0, 0], [3, 1]]), np.array([[1000, 4], [0, 8], [0, 0]]))
    assert s.tolist() == [[0.5, 0.5], [0.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize("alloc,expected", [
    ([], 0.0),
    ([0.5, 0.5, 0.5], 0.0),
    # mean 0.5, deviations +-0.5: population std dev 0.5
    ([0.0, 1.0], 0.5),
    # mean 0.25; squared deviations 0.0625, 0.0625, 0.0625, 0.5625 -> mean 0.1875 -> sqrt 0.4330
    ([0.0, 0.0, 0.0, 1.0], 0.4330),
])
def test_imbalance_is_the_population_std_dev_of_node_allocation(alloc, expected):
    assert metrics.imbalance(np.array(alloc)) == pytest.approx(expected, abs=1e-4)


def test_node_allocation_is_the_mean_of_cpu_and_memory():
    assert metrics.node_allocation(np.array([1.0, 0.2]), np.array([0.0, 0.4])).tolist() == pytest.approx([0.5, 0.3])


def test_zone_spread_counts_every_zone_with_nodes_and_the_skew():
    out = metrics.zone_spread(["a", "a", "b", None], ["a", "b", "c", None])
    # zone c has nodes but no pod: the skew is 2 (a) - 0 (c)
    assert out == {"perZone": {"": 1, "a": 2, "b": 1, "c": 0}, "skew": 2}
    assert metrics.zone_spread([], []) == {"perZone": {}, "skew": 0}


def test_most_common_prefers_the_first_seen_on_a_tie():
    assert metrics.most_common([("b",), ("a",), ("a",), ("b",)]) == ("b",)
    assert metrics.most_common([1, 2, 2]) == 2
    assert metrics.most_common([]) is None


@pytest.mark.parametrize("free,shape,expected", [
    # node 1: cpu 2000/500 = 4, memory 3Gi/1Gi = 3, slots 10 -> 3; node 2: cpu 1100/500 = 2, memory 8, slots 1 -> 1
    ([[2000, 3 << 30, 10], [1100, 8 << 30, 1]], [500, 1 << 30, 1], 4),
    # an overcommitted node (negative free) holds none
    ([[-500, 1 << 30, 5], [500, 1 << 30, 5]], [500, 1 << 30, 1], 1),
    # a column the shape does not request does not limit it
    ([[1000, 0, 3]], [500, 0, 1], 2),
    # a shape that requests nothing countable
    ([[1000, 10, 3]], [0, 0, 0], 0),
    ([], [500, 1, 1], 0),
])
def test_fragmentation_counts_whole_pods_node_by_node(free, shape, expected):
    arr = np.array(free, dtype=np.int64).reshape(len(free), len(shape))
    assert metrics.fits(arr, np.array(shape)) == expected
