"""DeviceFragmentation: a Score plugin for DRA devices (GPUs) that packs them, so that whole nodes
stay free for the claims that need many devices at once.

For each feasible node it reads the allocation DynamicResources found there (its CycleState) and
counts the node's devices of the classes concerned: ``classes`` when the args name some, else the
classes the pod's requests use. The score is the share of those devices in use once this
allocation is made, 0..100: the node left with the fewest free devices scores highest, a node
whose devices are all free scores lowest (a node without such devices scores 0). Pods without
claims to allocate are Skipped (their score is 0 everywhere).

Combine it with DynamicResources, which must run in the same policy (it finds the allocation).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from ...framework.interface import MAX_NODE_SCORE, CycleState, PluginArgs, PreScorePlugin, ScorePlugin
from ...framework.model.nodetable import NodeTable
from ...framework.model.podinfo import PodInfo
from ...framework.status import Status
from .allocator import STATE_KEY as DRA_STATE, DraState, node_devices
from .selectors import class_matches

NAME = "DeviceFragmentation"


class DeviceFragmentationArgs(PluginArgs):
    """``classes``: the DeviceClasses whose devices count; empty: those the pod asks for."""

    classes: list[str] = Field(default_factory=list, max_length=64)


class DeviceFragmentation(PreScorePlugin, ScorePlugin):
    NAME = NAME
    Args = DeviceFragmentationArgs
    args: DeviceFragmentationArgs  # what Args parsed

    def _state(self, state: CycleState) -> DraState | None:
        st = state.read(DRA_STATE)
        return st if isinstance(st, DraState) and st.to_allocate else None

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> Status:
        return Status.success() if self._state(state) is not None else Status.skip()

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> np.ndarray:
        out = np.zeros(len(rows), dtype=np.int64)
        st = self._state(state)
        if st is None:
            return out
        cache = self.handle.dra()
        names = self.args.classes or sorted({sub.class_name for i in st.to_allocate for r in st.claims[i].requests
                                             for sub in ((r.exactly,) if r.exactly else r.first_available)})
        classes = [c for c in (cache.device_class(n) for n in names) if c is not None]
        if not classes:
            return out
        specs = nodes.specs
        for k, row in enumerate(rows.tolist()):
            spec = specs[row]
            allocs = st.by_node.get(spec.name)
            if allocs is None:
                continue
            taken = allocs.device_ids()
            total = used = 0
            for dev, _, _ in node_devices(cache, spec.name, spec.labels).devices:
                if not any(class_matches(c, dev) for c in classes):
                    continue
                total += 1
                used += dev.id in taken or cache.in_use(dev.id)
            if total:
                out[k] = MAX_NODE_SCORE * used // total
        return out


PLUGIN = DeviceFragmentation
