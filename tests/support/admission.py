"""The policy store the webhooks decide on (cluster/admission.py, cluster/webhook_server.py)."""

from __future__ import annotations

from policy_scheduler.cache.policies import PolicyStore
from policy_scheduler.framework.interface import Handle
from policy_scheduler.metricsources.manager import MetricSources


def policy_store():
    """What Admission reads: the policy store, with its policies, namespaces and scheduler name."""
    namespaces = {"web": {"team": "web"},
                  "jobs": {"team": "batch", "policy-scheduler.io/default-policy": "batch"}}
    store = PolicyStore(MetricSources(), lambda name: Handle(), namespaces=namespaces)
    store.on_policy("ADDED", {"metadata": {"name": "batch", "generation": 1},
                              "spec": {"plugins": [{"name": "NodeResourcesFit"}],
                                       "namespaceSelector": {"matchLabels": {"team": "batch"}}}})
    return store
