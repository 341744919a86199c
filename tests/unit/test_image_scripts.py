"""hack/image/: the scripts behind `make image` / `make images` parse and explain themselves, and
the pause program (hack/image/pause.c) behaves as a pod sandbox's PID 1 must: it exits 0 on SIGTERM
and SIGINT and reaps the orphans it inherits. The images themselves are built and run by
`make image-verify` (buildah and a throwaway containerd; minutes, not a unit test)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "hack" / "image"
SCRIPTS = sorted(p for p in IMAGE.glob("*.sh") if p.name != "lib.sh")


def test_every_script_is_there():
    assert {p.name for p in SCRIPTS} >= {"base.sh", "build.sh", "busybox.sh", "export.sh", "pause.sh", "verify.sh"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses_and_explains_itself(script):
    subprocess.run(["bash", "-n", str(script)], check=True)
    out = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f"hack/image/{script.name}" in out.stdout
    assert "set -e" not in out.stdout


def ensure(cmd: str, package: str) -> None:
    """The command, installed from Debian when missing (hack/ensure-deb.sh): never a skip."""
    if not shutil.which(cmd):
        subprocess.run(["bash", str(IMAGE.parent / "ensure-deb.sh"), cmd, package], check=True)


@pytest.fixture(scope="module")
def pause(tmp_path_factory):
    ensure("gcc", "gcc")
    exe = tmp_path_factory.mktemp("pause") / "pause"
    subprocess.run(["gcc", "-Os", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(IMAGE / "pause.c")], check=True)
    return exe


def test_pause_prints_its_version(pause):
    out = subprocess.run([str(pause), "-v"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "policy-scheduler-pause 1"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_pause_exits_0_on_a_stop_signal(pause, sig):
    proc = subprocess.Popen([str(pause)], stderr=subprocess.PIPE, text=True)
    time.sleep(0.2)
    assert proc.poll() is None, "pause returned by itself"
    proc.send_signal(sig)
    assert proc.wait(timeout=5) == 0
    assert "not PID 1" in proc.stderr.read()


def test_pause_as_pid_1_reaps_orphans(pause):
    # root, as make test runs (the real-node test needs it too)
    assert os.geteuid() == 0, "a new PID namespace needs root"
    ensure("unshare", "util-linux")
    # In a new PID namespace, sh forks an orphan (sleep, whose parent exits at once) and becomes
    # pause: PID 1 inherits the sleep, which must not stay a zombie once it ends.
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "sh", "-c", f"(sleep 0.3 &); exec {pause}"], stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 5
        pid1 = None
        while pid1 is None and time.monotonic() < deadline:
            kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            pid1 = int(kids[0]) if kids else None
            time.sleep(0.05)
        assert pid1 is not None

        def orphans():
            text = Path(f"/proc/{pid1}/task/{pid1}/children").read_text().split()
            return [Path(f"/proc/{c}/stat").read_text().rsplit(")", 1)[1].split()[0] for c in text]

        while not orphans() and time.monotonic() < deadline:  # the sleep, reparented to pause
            time.sleep(0.02)
        time.sleep(0.8)  # it has ended by now
        assert orphans() == [], "a zombie child was not reaped"
        os.kill(pid1, signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
