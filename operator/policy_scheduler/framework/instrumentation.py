"""What a cycle reports about its own timing, without knowing where it goes.

The scheduling cycle (``schedule_one``, cycle/schedule.py) and the binding cycle
(cycle/binding_cycle.py) call the cycle's recorder, ``CycleState.recorder``: ``point`` once per
extension point and cycle (its duration and the status code it ended with), and ``plugin`` once per
plugin call, but only when ``sampled`` is true. Upstream times extension points in every cycle and
plugin calls in a sample of cycles (``pluginMetricsSamplePercent`` = 10, drawn per scheduling
cycle; the pod's binding cycle follows the same draw, as here, since it shares the CycleState).

``CycleRecorder`` itself records nothing: the default, so tests and benchmarks pay nothing. The
operator passes one backed by its metrics (cluster/telemetry.py); this module stays pure (no
metrics client).

Extension point labels are upstream's (pkg/scheduler/metrics): Filter is timed once per cycle
over every node (the nominated-node fast path included); Score covers Score and NormalizeScore,
whose plugin calls are reported as Score and ScoreExtensionNormalize (the latter only for
plugins that normalize).
"""

from __future__ import annotations

from .status import Code

PRE_ENQUEUE = "PreEnqueue"  # not timed (the queue passes NOOP); names the point in a plugin's error
PRE_FILTER = "PreFilter"
FILTER = "Filter"
POST_FILTER = "PostFilter"
PRE_SCORE = "PreScore"
SCORE = "Score"
SCORE_NORMALIZE = "ScoreExtensionNormalize"
RESERVE = "Reserve"
UNRESERVE = "Unreserve"
PERMIT = "Permit"
PRE_BIND = "PreBind"
BIND = "Bind"
POST_BIND = "PostBind"

EXTENSION_POINTS = (PRE_FILTER, FILTER, POST_FILTER, PRE_SCORE, SCORE, SCORE_NORMALIZE, RESERVE, UNRESERVE,
                    PERMIT, PRE_BIND, BIND, POST_BIND)

DEFAULT_SAMPLE_PERCENT = 10  # upstream pluginMetricsSamplePercent


class CycleRecorder:
    """Receives a cycle's timings; this base records nothing. ``sampled``: time plugin calls
    one by one in this cycle (callers check it before reading the clock)."""

    __slots__ = ("sampled",)

    def __init__(self, sampled: bool = False) -> None:
        self.sampled = sampled

    def point(self, point: str, code: Code, seconds: float) -> None:
        """One extension point of one cycle took ``seconds`` and ended with ``code``."""

    def plugin(self, plugin: str, point: str, code: Code, seconds: float) -> None:
        """One call of ``plugin`` at ``point`` (sampled cycles only)."""


NOOP = CycleRecorder()


class ListRecorder(CycleRecorder):
    """Keeps every call, for tests: ``points`` and ``plugins`` as tuples of their arguments."""

    __slots__ = ("points", "plugins")

    def __init__(self, sampled: bool = True) -> None:
        super().__init__(sampled)
        self.points: list[tuple[str, Code, float]] = []
        self.plugins: list[tuple[str, str, Code, float]] = []

    def point(self, point: str, code: Code, seconds: float) -> None:
        self.points.append((point, code, seconds))

    def plugin(self, plugin: str, point: str, code: Code, seconds: float) -> None:
        self.plugins.append((plugin, point, code, seconds))
