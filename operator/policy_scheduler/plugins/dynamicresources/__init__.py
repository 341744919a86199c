"""The DynamicResources family (kube-scheduler's plugins/dynamicresources): the DynamicResources
plugin, DeviceFragmentation (ours), the allocator, the DRA objects and their cache, the CEL
device selectors. README.md says what of upstream it implements and what it leaves out."""

from __future__ import annotations

from ...framework.interface import register_default_cache
from .cache import DraCache

register_default_cache("dra", DraCache)
