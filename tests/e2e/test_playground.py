"""`make playground` (hack/playground.py up) leaves a cluster where a bad policy is refused by the
operator's webhook, registered from outside the cluster (run --webhook-url), and the pods of every
example policy are placed, gpu-dra's each with a GPU of its own through DRA; `down` stops it all.
It runs in a directory of its own, with a control plane of its own beside the suite's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from kubernetes.utils import parse_quantity

import localcluster

ROOT = Path(__file__).resolve().parents[2]


def test_the_playground_refuses_a_bad_policy_and_places_every_example_policy(tmp_path):
    state = tmp_path / "playground"
    env = {**os.environ, "POLICY_SCHEDULER_PLAYGROUND": str(state)}
    play = [sys.executable, str(ROOT / "hack" / "playground.py")]
    try:
        up = subprocess.run([*play, "up"], capture_output=True, text=True, timeout=400, env=env)
        assert up.returncode == 0, f"{up.stdout[-4000:]}\n{up.stderr[-4000:]}"
        out = up.stdout
        print(out)
        total = sum(1 for _ in (ROOT / "policies").glob("*.yaml"))
        assert f"export KUBECONFIG={state / 'kubeconfig'}" in out
        assert "pods bound in" in out
        # every example policy placed pods: each appears in the placements' [policy ...] headers
        # each file's first object is its policy (gpu-dra.yaml holds the DRA objects of its example too)
        names = {next(yaml.safe_load_all(p.read_text()))["metadata"]["name"]
                 for p in (ROOT / "policies").glob("*.yaml")}
        assert len(names) == total and all(f"[policy {n}]" in out for n in names), (names, out)

        kubectl = localcluster.bin_dir(build=False) / "kubectl"
        kenv = {**os.environ, "KUBECONFIG": str(state / "kubeconfig")}
        check_gpu_dra(kubectl, kenv, out)

        bad = subprocess.run([str(kubectl), "apply", "-f", str(ROOT / "hack" / "playground" / "bad-policy.yaml")],
                             capture_output=True, text=True, timeout=60, env=kenv)
        assert bad.returncode != 0, bad.stdout
        assert 'admission webhook "schedulingpolicies.policy-scheduler.io" denied the request' in bad.stderr, bad.stderr
        assert "spec.plugins[0].args.scoringStrategy.type" in bad.stderr and "MostAlocated" in bad.stderr, bad.stderr
        st = subprocess.run([*play, "status"], capture_output=True, text=True, timeout=60, env=env)
        assert st.returncode == 0 and st.stdout.startswith("up:"), st.stdout
    finally:
        down = subprocess.run([*play, "down"], capture_output=True, text=True, timeout=120, env=env)
    assert down.returncode == 0 and "playground stopped" in down.stdout, down.stdout + down.stderr
    assert not state.exists()


def check_gpu_dra(kubectl, kenv: dict, out: str) -> None:
    """The pods of gpu-dra (their claims made by kube-controller-manager from the
    ResourceClaimTemplate of policies/gpu-dra.yaml) each got a device of their own, on their node,
    that the template's selector accepts, and the placements show which one; gpu-dra.yaml's
    Deployment was left out (nothing in the playground runs Deployments)."""

    def get(*args: str) -> list[dict]:
        p = subprocess.run([str(kubectl), "get", *args, "-o", "json"], capture_output=True, text=True,
                           timeout=60, env=kenv)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["items"]

    example = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "policies" / "gpu-dra.yaml").read_text()) if d}
    (request,) = example["ResourceClaimTemplate"]["spec"]["spec"]["devices"]["requests"]
    # the check below reads the template's selector as it is written: 40Gi of memory or more
    assert [s["cel"]["expression"] for s in request["exactly"]["selectors"]] == [
        'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0'], request
    driver = "gpu.example.com"

    def memory(d: dict):
        return parse_quantity(d["capacity"]["memory"]["value"])

    slices = get("resourceslices")
    devices = {(s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): (s["spec"]["nodeName"], d)
               for s in slices for d in s["spec"]["devices"]}
    # the GPU nodes publish devices the selector refuses too: the allocation had to choose
    assert any(memory(d) < parse_quantity("40Gi") for _, d in devices.values()), devices
    assert {n for n, _ in devices.values()} == {"gpu-b1", "gpu-b2"}, devices

    pods = get("pods", "-n", "playground", "-l", "policy-scheduler.io/policy=gpu-dra")
    claims = {c["metadata"]["name"]: c for c in get("resourceclaims", "-n", "playground")}
    assert len(pods) >= 2 and len(claims) == len(pods), (pods, claims)
    section = out.split("[policy gpu-dra]", 1)[1].split("\n\n", 1)[0]
    taken = set()
    for p in pods:
        name, node = p["metadata"]["name"], p["spec"].get("nodeName")
        assert node, f"{name} not placed"
        (st,) = p["status"]["resourceClaimStatuses"]
        claim = claims[st["resourceClaimName"]]
        # made from the template for this pod, allocated and reserved for it alone
        assert [o["uid"] for o in claim["metadata"]["ownerReferences"]] == [p["metadata"]["uid"]], claim
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [p["metadata"]["uid"]], claim
        (res,) = claim["status"]["allocation"]["devices"]["results"]
        assert res["request"] == request["name"] and res["driver"] == driver, res
        key = (res["driver"], res["pool"], res["device"])
        assert key in devices, (key, devices)
        on, dev = devices[key]
        assert on == node, f"{name} runs on {node} with a device of {on}"
        assert memory(dev) >= parse_quantity("40Gi"), (name, dev)
        assert key not in taken, f"{key} allocated twice"
        taken.add(key)
        # the placements name the device on the pod's node's line
        model, mem = dev["attributes"]["model"]["string"], dev["capacity"]["memory"]["value"]
        line = next((ln for ln in section.splitlines() if ln.split()[:1] == [node]), "")
        assert f"{name} [{res['device']} ({model} {mem})]" in line, (name, section)
    assert get("deployments", "-A") == [], "gpu-dra.yaml's Deployment was applied"
    assert [t["metadata"]["namespace"] for t in get("resourceclaimtemplates", "-A")] == ["playground"]
