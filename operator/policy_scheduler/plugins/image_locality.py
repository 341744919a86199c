"""ImageLocality: favor nodes that already hold the pod's images (upstream imagelocality/image_locality.go).

Score only, no NormalizeScore. The pod's images are those of its init containers, its regular
containers and (v1.33+) its image volumes (``spec.volumes[].image.reference``), each name
normalized by appending ":latest" when it has no tag. For every one of them present on the node
(under any of the node's names of an image), the node gains

    int64(float64(sizeBytes) * (float64(nodesHavingTheImage) / float64(allNodesInTheSnapshot)))

so images present on only a few nodes count less. With n = number of init containers + regular
containers + image volumes, the sum is clamped to [23 MiB, n * 1000 MiB] and

    score = 100 * (sum - 23 MiB) / (n * 1000 MiB - 23 MiB)        (integer division)
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..framework.interface import MAX_NODE_SCORE, CycleState, ScorePlugin
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo, normalized_image_name

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


def pod_images(pod: PodInfo) -> tuple[list[str], int]:
    """(normalized image names to look up, image count n) for ``pod``. PodInfo.images covers
    the containers; image volumes and the count of containers come from the raw spec."""
    raw: Mapping[str, Any] = pod.raw or {}
    spec = raw.get("spec") or {}
    names = list(pod.images)
    count = len(spec.get("initContainers") or []) + len(spec.get("containers") or []) if raw else len(names)
    for vol in spec.get("volumes") or []:
        image = (vol or {}).get("image")
        if image is not None:
            names.append(normalized_image_name(str(image.get("reference") or "")))
            count += 1
    return names, count


def calculate_priority(sums: np.ndarray, image_count: int) -> np.ndarray:
    """calculatePriority: clamp into [minThreshold, maxThreshold] and scale to 0..100."""
    max_threshold = MAX_CONTAINER_THRESHOLD * image_count
    clamped = np.where(sums < MIN_THRESHOLD, MIN_THRESHOLD, np.where(sums > max_threshold, max_threshold, sums))
    return MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)


class ImageLocality(ScorePlugin):
    NAME = "ImageLocality"
    Args = None

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> np.ndarray:
        names, count = pod_images(pod)
        present = [(n, nodes.image_nodes[n]) for n in names if n in nodes.image_nodes]
        if not present:  # no node has any of them: every sum is below the minimum threshold
            return np.zeros(len(rows), dtype=np.int64)
        total = float(nodes.n)
        sums = np.zeros(len(rows), dtype=np.int64)
        specs = nodes.specs
        row_list = rows.tolist()
        for name, having in present:
            spread = having / total
            sizes = np.array([specs[r].images.get(name, 0) for r in row_list], dtype=np.int64)
            sums += (sizes.astype(np.float64) * spread).astype(np.int64)  # truncates toward zero, as Go's int64()
        return calculate_priority(sums, count)


PLUGIN = ImageLocality
