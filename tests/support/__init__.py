"""What several test modules share, as one package (tests/ is on sys.path through pyproject.toml's
pytest ``pythonpath``): import ``support.<module>``, never another test module.

- ``fakeclient``: an in-memory stand-in for cluster/kubeclient.KubeClient;
- ``standby``: a second replica on the fake client (leadership, health, metrics);
- ``handles``: the real Handle (cache/handle.py's StateHandle) over an in-memory ClusterState,
  writing through ``MemoryActions`` (the operator's Actions, recorded in memory);
- ``kit``, ``drakit``, ``volkit``: plugin test kits (node tables, plugins built as the chain
  builds them; DRA and volume objects, and StateHandles with a fake API server for them);
- ``invalid_policies``: the invalid (and valid) SchedulingPolicies the unit and e2e tests refuse;
- ``objects``, ``admission``, ``whatif``, ``gangs``: what several test modules build (a node's
  and a pod's API bodies for an Engine, the webhooks' policy store, what-if snapshots and
  policies, native pod groups and an Engine that schedules them).

e2e helpers that need a control plane stay in tests/e2e/helpers.py.
"""
