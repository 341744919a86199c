"""What every model of a SchedulingPolicy shares: the strict base model and Kubernetes-style
durations ("15s", "1m30s", "500ms")."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from ..framework.validation import MAX_SHORT


class Model(BaseModel):
    """The base of the SchedulingPolicy models."""

    # strict: values are not coerced ("5" is not an integer), as the CRD's schema
    # defer_build: validators are built on first use, not at import (the operator's start-up)
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True, defer_build=True)


DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(value: str) -> float:
    """A Kubernetes-style duration ("15s", "1m30s", "500ms") in seconds."""
    if not re.match(DURATION_PATTERN, value):
        raise ValueError(f"{value!r} is not a duration (e.g. 15s, 1m30s, 500ms)")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(value))


Duration = Annotated[str, Field(pattern=DURATION_PATTERN, max_length=MAX_SHORT)]
