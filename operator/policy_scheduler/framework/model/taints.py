"""Taints and tolerations (v1.Taint, v1.Toleration) with upstream's ToleratesTaint rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = NO_SCHEDULE

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> "Taint":
        return cls(str(d.get("key", "")), str(d.get("value") or ""), str(d.get("effect", "")))


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> "Toleration":
        return cls(str(d.get("key") or ""), str(d.get("operator") or "Equal"),
                   str(d.get("value") or ""), str(d.get("effect") or ""))

    def tolerates(self, t: Taint) -> bool:
        """core/v1 Toleration.ToleratesTaint."""
        if self.effect and self.effect != t.effect:
            return False
        if self.key and self.key != t.key:
            return False
        op = self.operator
        if op in ("", "Equal"):
            return self.value == t.value
        if op == "Exists":
            return True
        if op in ("Lt", "Gt"):
            try:
                tv, ov = int(t.value), int(self.value)
            except ValueError:
                return False
            return tv < ov if op == "Lt" else tv > ov
        return False


def tolerated(taint: Taint, tolerations: Iterable[Toleration]) -> bool:
    for tol in tolerations:
        if tol.tolerates(taint):
            return True
    return False


def first_untolerated(taints: Iterable[Taint], tolerations: tuple[Toleration, ...],
                      effects: tuple[str, ...] = (NO_SCHEDULE, NO_EXECUTE)) -> Taint | None:
    """The first taint (in node order) with one of ``effects`` that no toleration tolerates."""
    for t in taints:
        if t.effect in effects and not tolerated(t, tolerations):
            return t
    return None
