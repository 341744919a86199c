"""policy-scheduler: a Kubernetes scheduler whose policies are SchedulingPolicy custom resources."""

__version__ = "0.1.0"

SCHEDULER_NAME = "policy-scheduler"
POLICY_LABEL = "policy-scheduler.io/policy"
# namespace label: the policy of the namespace's pods that carry no POLICY_LABEL
DEFAULT_POLICY_LABEL = "policy-scheduler.io/default-policy"
API_GROUP = "policy-scheduler.io"
API_VERSION = "v1alpha1"
