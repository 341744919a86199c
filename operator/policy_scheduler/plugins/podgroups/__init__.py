"""The pod-group family: Coscheduling (scheduler-plugins' PodGroups) and GangScheduling
(Kubernetes' own scheduling.k8s.io PodGroups), their caches, the machinery both share and the
pod-group cycle's placement code. README.md says what of upstream it implements and what it
leaves out."""

from __future__ import annotations

from ...framework.interface import register_default_cache
from .cache import PodGroupCache
from .native_cache import NativePodGroupCache

register_default_cache("pod_groups", PodGroupCache)
register_default_cache("native_pod_groups", NativePodGroupCache)
