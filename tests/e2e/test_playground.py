"""`make playground` (hack/playground.py up) leaves a cluster where a bad policy is refused by the
operator's webhook, registered from outside the cluster (run --webhook-url), and the pods of every
example policy are placed; `down` stops it all. It runs in a directory of its own, with a control
plane of its own beside the suite's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

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
