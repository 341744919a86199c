"""The pure layer that the operator (cluster/) and what-if (whatif/) share: the cluster state, what
the plugins read of the cluster and what a change of it means; the scheduling driver (scheduler/)
works on it.

- ``state.py``: ClusterState, fed one watch event at a time by ``apply_*`` methods that return
  the cluster events for the queue; assume/forget and assume-Reserve-Permit; KINDS, the API
  paths of the kinds that feed it.
- ``handle.py``: StateHandle, the one framework Handle over it, with the operator's Actions
  (API writes, queue, events) injected, or none in what-if.
- ``policies.py``: SchedulingPolicies as read, each judged by ``policy.validate`` (policy/); a pod's
  policy.
- ``revisions.py``: a policy's revisions (ControllerRevisions) as data: names, hashes, numbers,
  the history limit, the revision to fall back on, what changed between two.
- ``workloads.py``: Services and controllers, for system default spreading.
- ``rollouts.py``: a policy's staged rollout as data: which pods a canary takes, what the two
  arms did, the analysis's verdict (cluster/rollout_controller.py acts on it).

No client, no kopf, no tasks: the operator (cluster/) and what-if (whatif/) both use it.
"""
