"""What-if: the operator's own scheduling core run on a copy of the cluster's state.

- ``snapshot.py``: the versioned snapshot format (``policy-scheduler.io/snapshot/v2``): taking
  one from the API server (and Prometheus), loading and validating one from a file.
- ``world.py``: a snapshot turned into what the engine has: the NodeTable, the policies built by
  the operator's PolicyStore, and a Handle answering from the snapshot.
- ``pods.py``: the pods to place, from manifests (Pods, or templates multiplied).
- ``snapshot_groups.py``: the snapshot's PodGroups and CompositePodGroups.
- ``simulate.py``: places the pods with the operator's scheduling core, per policy, and measures
  the result (``metrics.py``); ``queue_run.py`` is its loop (the operator's queue on a virtual
  clock, the scheduling, pod-group and binding cycles, preemptions carried out);
  ``drilldown.py``: what every plugin said of some nodes for some pods.
- ``across.py``: the same pods against several clusters (or snapshots), ranked per policy.
- ``tune.py``: a policy's Score weights searched by replaying a window of pods (the operator's
  tuner and ``policy-scheduler tune``).
- ``report.py``: the terminal table, the JSON document and the self-contained HTML report
  (``report_html.py``: its stylesheet, charts and drill-down tables).

Nothing here writes to the cluster.
"""
