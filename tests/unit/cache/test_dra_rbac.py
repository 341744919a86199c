"""The ClusterRole (manifests/02-clusterrole.yaml, which the chart copies) lets the operator list
and watch every DRA kind its informers read (cache/state.py DRA_KINDS: the paths the operator's
sync watches), DeviceTaintRules included."""

from __future__ import annotations

from pathlib import Path

import yaml

from policy_scheduler.cache.state import DRA_KINDS

ROOT = Path(__file__).resolve().parents[3]


def granted(group: str, resource: str) -> set[str]:
    role = yaml.safe_load((ROOT / "manifests" / "02-clusterrole.yaml").read_text())
    verbs: set[str] = set()
    for rule in role["rules"]:
        if group in rule.get("apiGroups", ()) and resource in rule.get("resources", ()):
            verbs |= set(rule.get("verbs", ()))
    return verbs


def test_every_dra_kind_watched_is_granted():
    assert "devicetaintrules" in DRA_KINDS
    for kind, path in DRA_KINDS.items():
        group = path.split("/")[2]  # /apis/<group>/<version>/<resource>
        assert path.rsplit("/", 1)[1] == kind
        assert {"list", "watch"} <= granted(group, kind), f"the ClusterRole does not let the operator watch {path}"
