"""The volume plugins (kube-scheduler's plugins/volumebinding, volumerestrictions, volumezone,
nodevolumelimits), the storage objects they read, their cache and VolumeBinding's binder.
README.md says what of upstream they implement and what they leave out."""

from __future__ import annotations

from ...framework.interface import register_default_cache
from .cache import VolumeCache

register_default_cache("volumes", VolumeCache)
