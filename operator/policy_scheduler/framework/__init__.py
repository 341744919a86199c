"""The pure scheduling core: no kopf, no Kubernetes client, no I/O.

The plugin contract stays at the top: ``interface.py`` (plugin bases per extension point,
CycleState, Handle), ``status.py``, ``events.py`` (cluster events, queueing hints),
``registry.py`` and ``waiting.py`` (the pods a Permit plugin parked). The rest falls in four
groups:

- ``cycle/``: the scheduling and binding cycles (a policy's chain, the runtime that calls the
  plugins, ``schedule_one`` and its Decision, the binding cycle's plugin runs);
- ``queue/``: the scheduling queue, its sub-queues and the nominator;
- ``model/``: the parsed cluster objects the state holds and plugins read (the NodeTable,
  PodInfo, labels, quantities, taints, volumes, pod groups, resources);
- flat in framework/, helpers that plugin families share: ``preemption.py``, ``gangs.py``,
  ``metricrules.py``, ``metricview.py``, ``podcount.py``, ``validation.py`` and
  ``instrumentation.py``.
"""
