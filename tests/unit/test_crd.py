"""crds/ is generated from the pydantic models: the checked-in file must not drift."""

from pathlib import Path

import yaml

from policy_scheduler.api.crd import crd, crd_yaml

ROOT = Path(__file__).resolve().parents[2]


def test_checked_in_crd_matches_the_models():
    checked_in = (ROOT / "crds" / "schedulingpolicies.yaml").read_text()
    assert checked_in == crd_yaml(), "crds/schedulingpolicies.yaml drifted: run `make crd` and commit it"


def _walk(node, path="$"):
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


def test_schema_is_structural():
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        if not isinstance(node, dict) or path.endswith(".properties"):
            continue
        for banned in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "const", "title"):
            assert banned not in node, f"{path} has {banned}"
        if "properties" in node or "items" in node:
            assert node.get("type") in ("object", "array"), f"{path} has no type"
    spec = schema["properties"]["spec"]
    assert spec["properties"]["plugins"]["items"]["properties"]["args"]["x-kubernetes-preserve-unknown-fields"]
    assert yaml.safe_load(crd_yaml())["spec"]["names"]["kind"] == "SchedulingPolicy"
