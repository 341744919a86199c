"""NodeTable: the columnar cluster snapshot the scheduling cycle reads.

Rows are nodes (dense: rows ``0..n-1`` are live; removing a node moves the last row into its
place). Resource state is numpy columns so fit checks and resource scores are vector operations.
Everything is updated incrementally when a node or pod changes; nothing is rebuilt per pod.

Resource columns: ``cpu`` (millicores), ``memory`` (bytes), ``ephemeral-storage`` (bytes),
``pods`` (count), then every other (scalar/extended) resource a node advertises, added as it
first appears. ``requested`` sums the true requests of the pods on each node; its ``pods``
column is the pod count. ``nonzero`` holds cpu/memory requested with the scoring defaults.

A pod's request of a resource no node advertises gets no column: resource names in pod specs
are a tenant's choice, and a column costs every node a cell in two arrays (one pod naming ten
thousand made-up resources would otherwise cost 160 MB at 1,000 nodes). Such requests are
summed per row in ``loose`` (as much memory as the pods' own specs take) and become the
column's values when a node first advertises the name. Nothing reads them before: with no node
advertising a resource, allocatable is 0 everywhere and NodeResourcesFit refuses any positive
request of it whatever the others hold (upstream's verdict too).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from .nodelabels import MASK_CACHE_BYTES, NodeLabels
from .nodespec import MAX_DECLARED_FEATURES, NodeSpec, declared_features  # noqa: F401 (also imported from here)
from .nodetree import NodeTree
from .podinfo import AffinityTerm, PodInfo, WeightedAffinityTerm

CPU, MEMORY, EPHEMERAL, PODS = 0, 1, 2, 3
BASE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")

TopologyPair = tuple[str, str]  # (topology key, the node's value of that label)

# from this many pods on, add_pods/remove_pods count them with one numpy call per array
BULK_MIN = 8
REQUEST_COLS_KEPT = 256


class NodeTable(NodeLabels):
    def __init__(self, capacity: int = 64, mask_cache_bytes: int = MASK_CACHE_BYTES) -> None:
        self.resources: list[str] = list(BASE_RESOURCES)
        self.res_index: dict[str, int] = {r: i for i, r in enumerate(self.resources)}
        self.n = 0
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.specs: list[NodeSpec] = []
        self.tree = NodeTree()  # upstream's node order (zones round-robin), for scans and ties
        self._tree_rows: tuple[int, np.ndarray, np.ndarray] | None = None  # (node_version, rows, pos)
        cap = max(capacity, 1)
        self.allocatable = np.zeros((cap, len(self.resources)), dtype=np.int64)
        self.requested = np.zeros((cap, len(self.resources)), dtype=np.int64)
        self._room: tuple[np.ndarray, np.ndarray] | None = None  # the wider arrays of _widen
        self.nonzero = np.zeros((cap, 2), dtype=np.int64)
        self.unschedulable = np.zeros(cap, dtype=bool)
        # pods
        self.pods: list[dict[str, PodInfo]] = []  # per row: pod key -> PodInfo
        self.pod_node: dict[str, str] = {}  # pod key -> node name (bound or assumed)
        self.assumed: set[str] = set()
        self._orphans: dict[str, dict[str, PodInfo]] = {}  # node name not (yet) known -> pods
        self.used_ports: list[dict[tuple[str, str, int], int]] = []
        self.loose: list[dict[str, int]] = []  # per row: requests of resources with no column (above)
        self.pods_with_affinity: list[dict[str, PodInfo]] = []  # per row: those pods (upstream PodsWithAffinity)
        # per row: the pods with volumes the volume plugins read (PodInfo.volumes non-empty)
        self.pods_with_volumes: list[dict[str, PodInfo]] = []
        # "namespace/claim" -> number of pods on rows with a persistentVolumeClaim volume of that
        # claim (upstream NodeInfo.PVCRefCounts; generic ephemeral volumes do not count)
        self.pvc_refs: dict[str, int] = {}
        # The (anti-)affinity terms of the pods on rows, by kind: term -> {(topologyKey, value of that
        # label on the pod's node): occurrences}, one occurrence per (pod, term) on a node having
        # the key (a node without it puts the term in no domain). Preferred terms are keyed with
        # their weight. Kept in step with pods and node labels.
        self.required_affinity_terms: dict[AffinityTerm, dict[TopologyPair, int]] = {}
        self.required_anti_affinity_terms: dict[AffinityTerm, dict[TopologyPair, int]] = {}
        self.preferred_affinity_terms: dict[WeightedAffinityTerm, dict[TopologyPair, int]] = {}
        self.preferred_anti_affinity_terms: dict[WeightedAffinityTerm, dict[TopologyPair, int]] = {}
        self.image_nodes: dict[str, int] = {}  # image name -> number of nodes having it
        self._init_labels(mask_cache_bytes)
        # resource names of a pod's requests, in order -> their columns; () when one has none
        # (_count_rows)
        self._request_cols: dict[tuple[str, ...], tuple[int, ...]] = {}
        self.version = 0  # bumps on every change
        self.node_version = 0  # bumps when the node set, labels or taints change

    # ------------------------------------------------------------------ columns
    def _ensure_capacity(self, rows: int) -> None:
        cap = self.allocatable.shape[0]
        if rows <= cap:
            return
        new = max(rows, cap * 2)
        for name in ("allocatable", "requested", "nonzero"):
            old = getattr(self, name)
            arr = np.zeros((new, old.shape[1]), dtype=old.dtype)
            arr[: self.n] = old[: self.n]
            setattr(self, name, arr)
        u = np.zeros(new, dtype=bool)
        u[: self.n] = self.unschedulable[: self.n]
        self.unschedulable = u
        self._room = None  # the new arrays are exact: the next new column makes room anew

    def resource_column(self, name: str) -> int:
        """Column index of resource ``name``, which a node advertises; a new column's requested
        values are the pods' requests of it summed in ``loose`` until now."""
        i = self.res_index.get(name)
        if i is not None:
            return i
        i = len(self.resources)
        self.resources.append(name)
        self.res_index[name] = i
        self._widen(i + 1)
        self._request_cols.clear()  # lists that had no column for it
        for row, loose in enumerate(self.loose):
            q = loose.pop(name, 0)
            if q:
                self.requested[row, i] = q
        return i

    def _widen(self, cols: int) -> None:
        """``allocatable`` and ``requested`` to ``cols`` columns, as views of wider arrays whose
        width doubles when full: a cluster with a resource of its own per node (scheduler_perf's
        ExtendedResource, device plugins) adds its columns in linear time, not by copying both
        arrays once per new column. The room is reused only while this table's arrays are views
        of it (an overlay's or a regrown copy allocates room of its own)."""
        room = self._room
        if (room is None or room[0].shape[1] < cols or self.allocatable.base is not room[0]
                or self.requested.base is not room[1]):
            rows, have = self.allocatable.shape
            wide = max(cols, 2 * have)
            room = (np.zeros((rows, wide), dtype=np.int64), np.zeros((rows, wide), dtype=np.int64))
            room[0][:, :have], room[1][:, :have] = self.allocatable, self.requested
            self._room = room
        self.allocatable, self.requested = room[0][:, :cols], room[1][:, :cols]

    def request_vector(self, pod: PodInfo) -> np.ndarray:
        """The pod's true requests as a vector aligned with the resource columns (pods column = 1).
        A request of a resource no node advertises has no column and is not in it
        (``requests_unadvertised`` tells)."""
        v = np.zeros(len(self.resources), dtype=np.int64)
        index = self.res_index
        for r, q in pod.requests.items():
            col = index.get(r)
            if col is not None:
                v[col] = q
        v[PODS] = 1
        return v

    def requests_unadvertised(self, pod: PodInfo) -> bool:
        """Whether the pod asks for some of a resource no node advertises."""
        index = self.res_index
        return any(q > 0 and r not in index for r, q in pod.requests.items())

    # ------------------------------------------------------------------ nodes
    def upsert_node(self, node: NodeSpec | Mapping[str, Any]) -> int:
        spec = node if isinstance(node, NodeSpec) else NodeSpec.from_dict(node)
        row = self.index.get(spec.name)
        if row is None:
            row = self.n
            self._ensure_capacity(row + 1)
            self.n += 1
            self.names.append(spec.name)
            self.index[spec.name] = row
            self.specs.append(spec)
            self.pods.append({})
            self.used_ports.append({})
            self.loose.append({})
            self.pods_with_affinity.append({})
            self.pods_with_volumes.append({})
            self.requested[row] = 0
            self.nonzero[row] = 0
            old = None
        else:
            old = self.specs[row]
            self.specs[row] = spec
        for r in spec.allocatable:
            self.resource_column(r)
        self.allocatable[row] = 0
        for r, q in spec.allocatable.items():
            self.allocatable[row, self.res_index[r]] = q
        self.unschedulable[row] = spec.unschedulable
        if old is None or old.labels != spec.labels:
            self.tree.update(spec.name, spec.labels)
            if old is not None:
                self._unindex_labels(old)
                for pod in self.pods_with_affinity[row].values():
                    self._index_terms(pod, old.labels, -1)
                    self._index_terms(pod, spec.labels, 1)
            self._index_labels(spec)
        if old is None or old.images.keys() != spec.images.keys():
            if old is not None:
                for img in old.images:
                    self._dec_image(img)
            for img in spec.images:
                self.image_nodes[img] = self.image_nodes.get(img, 0) + 1
        if old is None or old.labels != spec.labels or old.taints != spec.taints:
            self.node_version += 1
            self._mask_cache.clear()
        if old is None:
            for pod in self._orphans.pop(spec.name, {}).values():
                self._add_to_row(pod, row)
        self.version += 1
        return row

    def remove_node(self, name: str) -> None:
        row = self.index.pop(name, None)
        if row is None:
            return
        spec = self.specs[row]
        pods = self.pods[row]
        if pods:  # keep the pods: they still exist and count if the node comes back
            self._orphans[name] = dict(pods)
            for pod in self.pods_with_volumes[row].values():  # re-counted if the node comes back
                for v in pod.volumes:
                    if v.pvc:
                        k = f"{pod.namespace}/{v.claim}"
                        c = self.pvc_refs.get(k, 0) - 1
                        if c > 0:
                            self.pvc_refs[k] = c
                        else:
                            self.pvc_refs.pop(k, None)
        for pod in self.pods_with_affinity[row].values():
            self._index_terms(pod, spec.labels, -1)
        self._unindex_labels(spec)
        self.tree.remove(name)
        for img in spec.images:
            self._dec_image(img)
        last = self.n - 1
        if row != last:
            for arr in (self.allocatable, self.requested, self.nonzero):
                arr[row] = arr[last]
            self.unschedulable[row] = self.unschedulable[last]
            for lst in self._row_lists():
                lst[row] = lst[last]
            self.index[self.names[row]] = row
        for lst in self._row_lists():
            lst.pop()
        self.n -= 1
        self.node_version += 1
        self._mask_cache.clear()
        self.version += 1

    def tree_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows in upstream's NodeTree order, each row's position in it); rebuilt only when a
        node comes, goes or changes labels."""
        cached = self._tree_rows
        if cached is None or cached[0] != self.node_version:
            index = self.index
            rows = np.fromiter((index[n] for n in self.tree.order()), dtype=np.int64, count=self.n)
            pos = np.empty(self.n, dtype=np.int64)
            pos[rows] = np.arange(self.n, dtype=np.int64)
            cached = self._tree_rows = (self.node_version, rows, pos)
        return cached[1], cached[2]

    def _row_lists(self) -> tuple[list, ...]:
        return (self.names, self.specs, self.pods, self.used_ports, self.pods_with_affinity, self.pods_with_volumes,
                self.loose)

    def _dec_image(self, img: str) -> None:
        c = self.image_nodes.get(img, 0) - 1
        if c <= 0:
            self.image_nodes.pop(img, None)
        else:
            self.image_nodes[img] = c

    # ------------------------------------------------------------------ pods
    def add_pod(self, pod: PodInfo, node_name: str, assumed: bool = False) -> None:
        """Account a pod bound (or assumed) to ``node_name``. Re-adding replaces the old copy."""
        key = pod.key
        if key in self.pod_node:
            self.remove_pod(key)
        self.pod_node[key] = node_name
        if assumed:
            self.assumed.add(key)
        row = self.index.get(node_name)
        if row is None:
            self._orphans.setdefault(node_name, {})[key] = pod
        else:
            self._add_to_row(pod, row)
        self.version += 1

    def add_pods(self, pairs: Iterable[tuple[PodInfo, str]]) -> list[str]:
        """``add_pod`` for each (pod, node) not in the table yet whose node is (the nominated
        pods a cycle counts): the counts of all of them added in one numpy step per array, not a
        scalar update each. Returns the keys added, for ``remove_pods``."""
        fresh: list[tuple[PodInfo, str, int, str]] = []
        seen: set[str] = set()
        for pod, node in pairs:
            row = self.index.get(node)
            key = pod.key
            if row is not None and key not in self.pod_node and key not in seen:
                seen.add(key)
                fresh.append((pod, key, row, node))
        if len(fresh) < BULK_MIN:
            for pod, _, _, node in fresh:
                self.add_pod(pod, node)
            return [key for _, key, _, _ in fresh]
        self._count_rows([(pod, row) for pod, _, row, _ in fresh], 1)
        pod_node, pods = self.pod_node, self.pods
        for pod, key, row, node in fresh:
            pod_node[key] = node
            pods[row][key] = pod
            self._row_extras(pod, row, 1)
        self.version += 1
        return [key for _, key, _, _ in fresh]

    def remove_pods(self, keys: Iterable[str]) -> None:
        """``remove_pod`` for each key, the counts taken out in one numpy step per array."""
        keys = list(keys)
        if len(keys) < BULK_MIN:
            for key in keys:
                self.remove_pod(key)
            return
        gone: list[tuple[PodInfo, int]] = []
        for key in keys:
            pod, row = self._unlink(key)
            if pod is not None and row is not None:
                gone.append((pod, row))
                self._row_extras(pod, row, -1)
        self._count_rows(gone, -1)
        self.version += 1

    def _count_rows(self, pods: list[tuple[PodInfo, int]], sign: int) -> None:
        """Add (sign 1) or take out (-1) the requests, pod counts and non-zero requests of
        ``pods`` on their rows, with ``np.add.at`` (rows repeat). A pod requesting a resource no
        node advertises (rare: a made-up name) is counted on its own by ``_count_row``."""
        at: list[int] = []
        per: list[int] = []  # how many requests each pod has
        cols: list[int] = []
        qty: list[int] = []
        nz: list[tuple[int, int]] = []
        known = self._request_cols
        for pod, row in pods:
            req = pod.requests
            names = tuple(req)
            cs = known.get(names)
            if cs is None:
                cs = self._cols_of(names)
            if not cs and names:  # some name has no column
                self._count_row(pod, row, sign)
                continue
            at.append(row)
            nz.append((pod.nonzero_cpu, pod.nonzero_memory))
            per.append(len(cs))
            cols.extend(cs)
            qty.extend(req.values())
        if not at:
            return
        q = np.array(qty, dtype=np.int64)
        idx = (np.repeat(at, per), np.array(cols, dtype=np.int64))
        np.add.at(self.requested, idx, q if sign > 0 else -q)
        np.add.at(self.requested[:, PODS], at, sign)
        n = np.array(nz, dtype=np.int64)
        np.add.at(self.nonzero, at, n if sign > 0 else -n)

    def _cols_of(self, names: tuple[str, ...]) -> tuple[int, ...]:
        """The columns of these resource names, in order; () when some name has none (no node
        advertises it). Remembered for the next pod with the same names; at most
        REQUEST_COLS_KEPT such lists (they come from pod specs: a tenant's choice)."""
        index = self.res_index
        cs = tuple(index.get(r, -1) for r in names)
        if -1 in cs:
            cs = ()
        if len(self._request_cols) >= REQUEST_COLS_KEPT:
            self._request_cols.clear()
        self._request_cols[names] = cs
        return cs

    def _count_loose(self, row: int, name: str, q: int) -> None:
        loose = self.loose[row]
        v = loose.get(name, 0) + q
        if v:
            loose[name] = v
        else:
            loose.pop(name, None)

    def _add_to_row(self, pod: PodInfo, row: int) -> None:
        self.pods[row][pod.key] = pod
        self._count_row(pod, row, 1)
        self._row_extras(pod, row, 1)

    def _count_row(self, pod: PodInfo, row: int, sign: int) -> None:
        """``_count_rows`` for one pod: scalar updates (cheaper than ``np.add.at`` for one)."""
        index = self.res_index
        for r, q in pod.requests.items():
            col = index.get(r)
            if col is None:
                self._count_loose(row, r, sign * q)
            else:
                self.requested[row, col] += sign * q
        self.requested[row, PODS] += sign
        self.nonzero[row, 0] += sign * pod.nonzero_cpu
        self.nonzero[row, 1] += sign * pod.nonzero_memory

    def _row_extras(self, pod: PodInfo, row: int, sign: int) -> None:
        """What a pod adds to its row besides the counts: host ports, volumes, affinity terms."""
        ports = self.used_ports[row]
        for p in pod.host_ports:
            c = ports.get(p, 0) + sign
            if c > 0:
                ports[p] = c
            else:
                ports.pop(p, None)
        if pod.volumes:
            self._add_volumes(pod, row, sign)
        if pod.has_affinity:
            if sign > 0:
                self.pods_with_affinity[row][pod.key] = pod
            else:
                self.pods_with_affinity[row].pop(pod.key, None)
            self._index_terms(pod, self.specs[row].labels, sign)

    def _add_volumes(self, pod: PodInfo, row: int, sign: int) -> None:
        if sign > 0:
            self.pods_with_volumes[row][pod.key] = pod
        else:
            self.pods_with_volumes[row].pop(pod.key, None)
        refs = self.pvc_refs
        for v in pod.volumes:
            if v.pvc:
                k = f"{pod.namespace}/{v.claim}"
                c = refs.get(k, 0) + sign
                if c > 0:
                    refs[k] = c
                else:
                    refs.pop(k, None)

    def _index_terms(self, pod: PodInfo, labels: Mapping[str, str], sign: int) -> None:
        """Add (sign 1) or take back (sign -1) the pod's terms on a node with ``labels``."""
        # each index is keyed by its own kind of term
        indexes: tuple[tuple[dict[Any, dict[TopologyPair, int]], Iterable[AffinityTerm | WeightedAffinityTerm]],
                       ...] = ((self.required_affinity_terms, pod.required_affinity),
                               (self.required_anti_affinity_terms, pod.required_anti_affinity),
                               (self.preferred_affinity_terms, pod.preferred_affinity),
                               (self.preferred_anti_affinity_terms, pod.preferred_anti_affinity))
        for index, terms in indexes:
            for t in terms:
                key = t.term.topology_key if isinstance(t, WeightedAffinityTerm) else t.topology_key
                value = labels.get(key)
                if value is None:
                    continue
                pairs = index.setdefault(t, {})
                pair = (key, value)
                c = pairs.get(pair, 0) + sign
                if c:
                    pairs[pair] = c
                else:
                    del pairs[pair]
                    if not pairs:
                        del index[t]

    def remove_pod(self, key: str) -> PodInfo | None:
        """Forget a pod (deleted, or an assumption undone). Returns the PodInfo it had."""
        if key not in self.pod_node:
            self.assumed.discard(key)
            return None
        pod, row = self._unlink(key)
        if pod is not None and row is not None:
            self._count_row(pod, row, -1)
            self._row_extras(pod, row, -1)
        self.version += 1
        return pod

    def _unlink(self, key: str) -> tuple[PodInfo | None, int | None]:
        """Take the pod of ``key`` out of the pod maps (its row's, or the orphans of a node not
        in the table): (the pod, its row; None for an orphan or an unknown key). Its counts and
        row extras are the caller's to take out."""
        node_name = self.pod_node.pop(key, None)
        self.assumed.discard(key)
        if node_name is None:
            return None, None
        row = self.index.get(node_name)
        if row is None:
            return self._orphans.get(node_name, {}).pop(key, None), None
        return self.pods[row].pop(key, None), row

    def confirm(self, key: str) -> None:
        """An assumed pod was seen bound by the API: it is no longer just assumed."""
        self.assumed.discard(key)

    def node_of(self, key: str) -> str | None:
        return self.pod_node.get(key)

    def pod(self, key: str) -> PodInfo | None:
        node = self.pod_node.get(key)
        if node is None:
            return None
        row = self.index.get(node)
        if row is None:
            return self._orphans.get(node, {}).get(key)
        return self.pods[row].get(key)

    def iter_pods(self, rows: Iterable[int] | None = None):
        """(row, PodInfo) for pods on the given rows (default all rows)."""
        for row in (range(self.n) if rows is None else rows):
            for p in self.pods[row].values():
                yield row, p

    def __len__(self) -> int:
        return self.n

