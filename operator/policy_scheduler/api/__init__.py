"""The SchedulingPolicy API: pydantic models (the single source of truth) and CRD generation."""

from .models import (Condition, PolicyPluginStatus, SchedulingPolicy, SchedulingPolicySpec,  # noqa: F401
                     SchedulingPolicyStatus)
