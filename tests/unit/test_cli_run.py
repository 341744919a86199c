"""`policy-scheduler run` before it serves: a port it cannot listen on is one line naming the flag
and the port, exit status 1, no traceback."""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from policy_scheduler.cli import build_parser
from policy_scheduler.commands import run as cmd

BIN = Path(sys.executable).parent


@pytest.fixture
def kubeconfig(tmp_path) -> Path:
    """A kubeconfig whose server nobody serves: `run` reads it, and stops before connecting."""
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


@pytest.fixture
def busy():
    """A port someone listens on (127.0.0.1)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def run(kubeconfig, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "policy-scheduler"), "run", "--kubeconfig", str(kubeconfig),
                           "--leader-elect=false", "--metrics-port", "0", "--health-port", "0", *flags],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("flag", ["--metrics-port", "--health-port", "--webhook-port"])
def test_a_port_in_use_is_one_line_naming_the_flag(kubeconfig, busy, flag):
    address = flag.replace("-port", "-address")
    p = run(kubeconfig, flag, str(busy), address, "127.0.0.1")
    assert p.returncode == 1
    assert p.stderr == (f"policy-scheduler: {flag} {busy}: cannot listen on 127.0.0.1:{busy}: "
                        "address already in use\n")


def test_two_flags_naming_one_port(kubeconfig, busy):
    p = run(kubeconfig, "--metrics-port", "18099", "--health-port", "18099")
    assert (p.returncode, p.stderr) == (1, "policy-scheduler: --health-port 18099: --metrics-port is the same port\n")


def test_with_json_logs_the_reason_is_a_json_line(kubeconfig, busy):
    p = run(kubeconfig, "--log-format", "json", "--health-port", str(busy), "--health-address", "127.0.0.1")
    assert p.returncode == 1
    line, = p.stderr.splitlines()
    assert json.loads(line)["msg"] == (f"--health-port {busy}: cannot listen on 127.0.0.1:{busy}: "
                                       "address already in use")


def test_port_problem():
    a = build_parser().parse_args(["run", "--metrics-port", "0", "--health-port", "0"])
    assert cmd.port_problem(a) is None
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        a = build_parser().parse_args(["run", "--metrics-port", str(port), "--metrics-address", "127.0.0.1"])
        assert cmd.port_problem(a).startswith(f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}: address ")
        a = build_parser().parse_args(["run", "--metrics-port", str(port), "--metrics-address", "0.0.0.0"])
        assert "address already in use" in cmd.port_problem(a)  # the wildcard address includes 127.0.0.1
    finally:
        s.close()
    assert cmd.cannot_listen("127.0.0.1", 70000) == "not a port (1 to 65535)"
    assert cmd.cannot_listen("no-such-host.invalid", 8080).startswith("unknown address")


def test_a_port_taken_after_the_check_is_reported_the_same_way(kubeconfig, monkeypatch, capsys):
    """Between the check and the servers' bind another process may take the port: serve's OSError
    is the same one line (the check, run again, names the flag)."""
    import policy_scheduler.serve

    checks = iter([None, "--metrics-port 9: cannot listen on 0.0.0.0:9: address already in use"])
    monkeypatch.setattr(cmd, "port_problem", lambda a: next(checks))
    monkeypatch.setattr(cmd, "_setup_logging", lambda *a: None)

    async def serve(*a, **kw):
        raise OSError(errno.EADDRINUSE, "Address already in use")

    monkeypatch.setattr(policy_scheduler.serve, "serve", serve)
    a = build_parser().parse_args(["run", "--kubeconfig", str(kubeconfig), "--leader-elect=false"])
    assert a.fn(a) == 1
    assert capsys.readouterr().err == ("policy-scheduler: --metrics-port 9: cannot listen on 0.0.0.0:9: "
                                       "address already in use\n")


def test_sigusr1_dumps_every_threads_stack_and_the_process_goes_on():
    code = ("import os, signal, sys, threading, time\n"
            "from policy_scheduler.commands.run import dump_stacks_on_sigusr1\n"
            "dump_stacks_on_sigusr1()\n"
            "def parked_in_a_worker(): time.sleep(30)\n"
            "threading.Thread(target=parked_in_a_worker, daemon=True).start()\n"
            "time.sleep(0.2)\n"
            "os.kill(os.getpid(), signal.SIGUSR1)\n"
            "time.sleep(0.2)\n"
            "print('still running')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "still running"
    assert "parked_in_a_worker" in out.stderr  # the other thread's stack too
    assert "Current thread" in out.stderr
