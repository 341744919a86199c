"""What-if: the operator's own scheduling core run on a copy of the cluster's state.

- ``snapshot.py``: the versioned snapshot format (``policy-scheduler.io/snapshot/v2``): taking
  one from the API server (and Prometheus), loading and validating one from a file.
- ``world.py``: a snapshot turned into what the engine has: the NodeTable, the policies built by
  the operator's PolicyStore, and a Handle answering from the snapshot.
- ``pods.py``: the pods to place, from manifests (Pods, or templates multiplied).
- ``simulate.py``: places the pods in order with ``schedule_one`` and the operator's assume and
  Reserve, per policy, and measures the result (``metrics.py``).
- ``report.py``: the terminal table, the JSON document and the self-contained HTML report.

Nothing here writes to the cluster.
"""
