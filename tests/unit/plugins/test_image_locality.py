"""ImageLocality scores (upstream imagelocality/image_locality.go and its v1.37 test table).

sum = sum over the pod's images present on the node of int(size * nodesHavingIt / allNodes),
clamped to [23 MiB, n * 1000 MiB]; score = 100 * (sum - 23 MiB) / (n * 1000 MiB - 23 MiB).
"""

from __future__ import annotations

import numpy as np
from support import kit
import pytest

from policy_scheduler.framework.interface import CycleState, Handle
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.plugins.image_locality import PLUGIN, pod_images

MB = 1024 * 1024


def make_node(name, images=()):
    """``images``: (names, size in MiB) pairs."""
    return {"metadata": {"name": name},
            "status": {"allocatable": {"pods": "110"},
                       "images": [{"names": list(n), "sizeBytes": s * MB} for n, s in images]}}


def make_pod(*images, init=(), volumes=()):
    spec = {"containers": [{"name": f"c{i}", "image": im} for i, im in enumerate(images)]}
    if init:
        spec["initContainers"] = [{"name": f"i{i}", "image": im} for i, im in enumerate(init)]
    if volumes:
        spec["volumes"] = [{"name": f"v{i}", "image": {"reference": ref}} for i, ref in enumerate(volumes)]
    return parse_pod({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})


def score(pod, nodes, rows=None):
    t = NodeTable()
    for n in nodes:
        t.upsert_node(n)
    rows = np.arange(t.n) if rows is None else np.asarray(rows)
    out = PLUGIN(None, Handle()).score(CycleState(), pod, t, rows)
    assert out.dtype == np.int64
    return out.tolist()


NODE_40_300_2000 = make_node("node1", [(["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40),
                                       (["gcr.io/300:latest", "gcr.io/300:v1"], 300),
                                       (["gcr.io/2000:latest"], 2000)])
NODE_250_10 = make_node("node2", [(["gcr.io/250:latest"], 250), (["gcr.io/10:latest", "gcr.io/10:v1"], 10)])
NODE_600_40_900 = make_node("node1", [(["gcr.io/600:latest"], 600), (["gcr.io/40:latest"], 40),
                                      (["gcr.io/900:latest"], 900)])
NODE_300_600_900 = make_node("node2", [(["gcr.io/300:latest"], 300), (["gcr.io/600:latest"], 600),
                                       (["gcr.io/900:latest"], 900)])
NODE_4000_30 = make_node("node1", [(["gcr.io/4000:latest"], 4000), (["gcr.io/30:latest"], 30)])
NODE_20_30_40 = make_node("node2", [(["gcr.io/20:latest"], 20), (["gcr.io/30:latest"], 30),
                                    (["gcr.io/40:latest"], 40)])
EMPTY = make_node("node3")

CASES = [
    # node1: 40M/2 = 20M < 23M -> 0. node2: 100 * (250M/2 - 23M) / (2000M - 23M) = 5
    ("two images spread on two nodes, prefer the larger image one",
     make_pod("gcr.io/40", "gcr.io/250"), [NODE_40_300_2000, NODE_250_10], [0, 5]),
    # node1: 100 * ((40M + 300M)/2 - 23M) / (2000M - 23M) = 7
    ("two images on one node, prefer this node", make_pod("gcr.io/40", "gcr.io/300"),
     [NODE_40_300_2000, NODE_250_10], [7, 0]),
    # node1: 4000M/2 = 2000M >= max threshold 2000M -> 100; node2: 10M/2 < 23M -> 0
    ("if exceed limit, use limit", make_pod("gcr.io/4000", "gcr.io/10"), [NODE_4000_30, NODE_250_10], [100, 0]),
    # 3 nodes in the snapshot: 100 * (4000M/3 - 23M) / (2000M - 23M) = 66
    ("the spread uses every node in the snapshot", make_pod("gcr.io/4000", "gcr.io/10"),
     [NODE_4000_30, NODE_250_10, EMPTY], [66, 0, 0]),
    # node1: 100 * (600M*2/3 + 900M*2/3 - 23M) / (3000M - 23M) = 32
    # node2: 100 * (300M/3 + 600M*2/3 + 900M*2/3 - 23M) / (3000M - 23M) = 36
    ("pod with multiple large images, node2 is preferred", make_pod("gcr.io/300", "gcr.io/600", "gcr.io/900"),
     [NODE_600_40_900, NODE_300_600_900, EMPTY], [32, 36, 0]),
    # gcr.io/30 is on both nodes (2/2), gcr.io/40 on one (1/2)
    # node1 (4000, 30): 100 * (30M - 23M) / (2000M - 23M) = 0
    # node2 (20, 30, 40): 100 * (30M + 40M/2 - 23M) / (2000M - 23M) = 1
    ("pod with multiple small images", make_pod("gcr.io/30", "gcr.io/40"),
     [NODE_4000_30, NODE_20_30_40], [0, 1]),
    # image volume counts as an image (n = 2): node1 100 * (300M/2 - 23M) / (2000M - 23M) = 6
    ("pod with ImageVolume", make_pod("gcr.io/30", volumes=["gcr.io/300"]),
     [make_node("node1", [(["gcr.io/300:latest"], 300)]), make_node("node2", [(["gcr.io/30:latest"], 30)])],
     [6, 0]),
    ("init container images count", make_pod("gcr.io/30", init=["gcr.io/300"]),
     [NODE_40_300_2000, NODE_20_30_40], [6, 0]),
    # tagged names match exactly; an untagged name matches only ":latest"
    ("tags", make_pod("gcr.io/300:v1"), [NODE_40_300_2000, make_node("x", [(["gcr.io/300:latest"], 300)])],
     [100 * (300 * MB // 2 - 23 * MB) // (1000 * MB - 23 * MB), 0]),
    ("registry port is not a tag", make_pod("localhost:5000/app"),
     [make_node("a", [(["localhost:5000/app:latest"], 500)])],
     [100 * (500 * MB - 23 * MB) // (1000 * MB - 23 * MB)]),
    ("no node has any image", make_pod("gcr.io/none"), [NODE_40_300_2000, EMPTY], [0, 0]),
    # the same image twice counts twice, and n = 2: 100 * (2 * 600M - 23M) / (2000M - 23M) = 59
    ("repeated image", make_pod("gcr.io/600", "gcr.io/600"), [make_node("a", [(["gcr.io/600:latest"], 600)])],
     [59]),
]


@pytest.mark.parametrize("pod, nodes, want", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_score(pod, nodes, want):
    assert score(pod, nodes) == want


def test_rows_subset_still_spreads_over_all_nodes():
    # scoring only node1 of 3: the spread is still 1/3 -> 100 * (4000M/3 - 23M) / (2000M - 23M) = 66
    assert score(make_pod("gcr.io/4000", "gcr.io/10"), [NODE_4000_30, NODE_250_10, EMPTY], [0]) == [66]


def test_pod_images_counts_containers_and_volumes():
    pod = make_pod("a", "b:1", init=["c"], volumes=["d"])
    names, count = pod_images(pod)
    assert names == ["c:latest", "a:latest", "b:1", "d:latest"] and count == 4


# ------------------------------------------------------------------ args
@pytest.mark.parametrize("args", [{"x": 1}, {"weight": 2}])
def test_takes_no_args(args):
    kit.assert_takes_no_args(PLUGIN.NAME, args)
