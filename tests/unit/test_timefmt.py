"""timefmt: metav1.Time and MicroTime text, the second's text reused while the second lasts."""

from __future__ import annotations

from datetime import datetime, timezone

from policy_scheduler import timefmt


def test_now_texts_follow_the_clock_across_seconds(monkeypatch):
    for t in (1764240000.0, 1764240000.999999, 1764240001.25, 1764239999.5, 1798761599.000001):
        monkeypatch.setattr(timefmt.time, "time", lambda t=t: t)
        dt = datetime.fromtimestamp(t, timezone.utc)
        assert timefmt.now_rfc3339() == dt.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert timefmt.now_micro()[:20] == dt.strftime("%Y-%m-%dT%H:%M:%S.")
        micro = timefmt.now_micro()
        assert micro.endswith("Z") and len(micro) == 27 and abs(int(micro[20:26]) - dt.microsecond) <= 1
        assert timefmt.parse_rfc3339(timefmt.now_rfc3339()) == int(t)
