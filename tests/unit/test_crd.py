"""crds/ is generated from the pydantic models: the checked-in file must not drift."""

from pathlib import Path

import yaml

from policy_scheduler.policy.crd import crd, crd_yaml

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


def test_plugins_are_a_list_map_and_open_args_objects_are_capped():
    """A duplicate plugin name is refused by the API server naming the entry (spec.plugins[2]);
    every object of args that keeps unknown fields has at most policy/limits.MAX_KEYS fields."""
    from policy_scheduler.policy.limits import MAX_KEYS

    spec = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    plugins = spec["properties"]["plugins"]
    assert plugins["x-kubernetes-list-type"] == "map" and plugins["x-kubernetes-list-map-keys"] == ["name"]
    assert "name" in plugins["items"]["required"] and "x-kubernetes-validations" not in plugins
    args = plugins["items"]["properties"]["args"]
    open_objects = [node for _, node in _walk(args) if isinstance(node, dict)
                    and node.get("x-kubernetes-preserve-unknown-fields")]
    assert len(open_objects) > 10 and all(n["maxProperties"] == MAX_KEYS for n in open_objects)
