"""The pure scheduling core: no kopf, no Kubernetes client, no I/O.

The plugin contract stays at the top: ``interface.py`` (plugin bases per extension point,
CycleState, Handle), ``status.py``, ``events.py`` (cluster events, queueing hints),
``registry.py`` and ``waiting.py`` (the pods a Permit plugin parked). The rest falls in four
groups:

- ``cycle/``: the scheduling and binding cycles (a policy's chain, the runtime that calls the
  plugins, ``schedule_one`` and its Decision, the binding cycle's plugin runs);
- ``queue/``: the scheduling queue, its sub-queues and the nominator;
- ``model/``: the parsed cluster objects the state holds and plugins read (the NodeTable,
  PodInfo, labels, quantities, taints, resources);
- flat in framework/, helpers that plugins share: ``preemption.py``, ``group_preemption.py``,
  ``metricrules.py``, ``metricview.py``, ``podcount.py``, ``validation.py`` and
  ``instrumentation.py``.

The plugin families' own code (DRA, pod groups, volumes: their objects, caches, allocator, CEL,
the pod-group cycle) lives with their plugins under plugins/<family>/; the Handle names their
caches (``volumes()``, ``dra()``, ``pod_groups()``, ``native_pod_groups()``) without their types,
and each family registers its empty default (``interface.register_default_cache``).
"""
