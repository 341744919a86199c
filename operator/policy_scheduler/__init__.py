"""policy-scheduler: a Kubernetes scheduler whose policies are SchedulingPolicy custom resources."""

import os

# One BLAS thread, set before numpy is first imported (the tuner's worker process inherits it):
# the scheduler's numpy work is short vectors and small matrices, where OpenBLAS's extra threads
# only spin and take CPU from the API server and etcd on a small machine. Measured on
# SchedulingBasic 1,000 x 5,000 (bench/throughput.py, two runs each): 1.34 ms of CPU per pod
# instead of 1.43, and 540-549 pods/s instead of 522-537. An explicit setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"

SCHEDULER_NAME = "policy-scheduler"
POLICY_LABEL = "policy-scheduler.io/policy"
# namespace label: the policy of the namespace's pods that carry no POLICY_LABEL
DEFAULT_POLICY_LABEL = "policy-scheduler.io/default-policy"
API_GROUP = "policy-scheduler.io"
API_VERSION = "v1alpha1"
