"""The package as a user gets it: a wheel built from this tree goes into a new virtualenv after the
hash-checked lock (`pip install --require-hashes -r requirements/runtime.txt`, then the wheel with
`--no-deps`, the same steps as the image's build stage in the Dockerfile), and the installed
`policy-scheduler` answers `--version` and prints the checked-in CRD.

The lock's files come from PyPI once and are kept in a wheel house under the project's cache
directory (pip's own HTTP cache keeps nothing when the index answers without cache headers, as it
does on the project's machines), so later runs install offline, still checking every hash.
The locks themselves are also checked against pyproject.toml, without the network."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
REQ = ROOT / "requirements"
RUNTIME, TEST, PIP = REQ / "runtime.txt", REQ / "test.txt", REQ / "pip.txt"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# as hack/build.sh: one cache per machine, shared by every checkout
CACHE = Path(os.environ.get("POLICY_SCHEDULER_CACHE")
             or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "policy-scheduler")
WHEELHOUSE = CACHE / "wheels"


def pins(lock: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (version, hashes) of a lock written by `make lock`."""
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for entry in re.split(r"\n(?=\S)", lock.read_text()):
        m = re.match(r"([A-Za-z0-9._-]+)==(\S+)", entry)
        if m:
            out[canonicalize_name(m[1])] = (m[2], frozenset(re.findall(r"--hash=(sha256:[0-9a-f]{64})", entry)))
    return out


def _assert_pinned(reqs: list[str], lock: Path) -> None:
    locked = pins(lock)
    for text in reqs:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in locked, f"{req.name} is not in {lock.relative_to(ROOT)}: run `make lock`"
        assert req.specifier.contains(locked[name][0], prereleases=True), \
            f"{lock.relative_to(ROOT)} pins {req.name}=={locked[name][0]}, pyproject.toml wants {text}: run `make lock`"


def test_locks_pin_what_pyproject_asks_for_with_hashes():
    runtime, test, pip = pins(RUNTIME), pins(TEST), pins(PIP)
    assert all(hashes for _, hashes in [*runtime.values(), *test.values(), *pip.values()]), "a pin without --hash"
    _assert_pinned(PYPROJECT["project"]["dependencies"], RUNTIME)
    _assert_pinned(PYPROJECT["project"]["optional-dependencies"]["test"], TEST)
    _assert_pinned(PYPROJECT["build-system"]["requires"], TEST)  # `make venv` installs with --no-build-isolation
    # test.txt is the runtime lock plus the rest: the same versions and files for every runtime pin
    assert {n: test[n] for n in runtime} == runtime
    assert set(pip) == {"pip"} and pip["pip"] == test["pip"]


def _pip(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=timeout)


def _run(*cmd, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120, env=env, **kw)


def test_wheel_installs_from_the_lock_and_runs(tmp_path):
    setuptools = metadata.version("setuptools") if _installed("setuptools") else "none"
    if setuptools == "none" or Version(setuptools) < Version("77"):
        pytest.fail(f"setuptools {setuptools} in {sys.prefix}: older than the lock's, run `make venv`")

    # the wheel, from a copy of the sources that a wheel needs (the build writes next to them)
    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / f, src / f)
    shutil.copytree(ROOT / "operator", src / "operator", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    built = _pip("wheel", "-q", "--no-deps", "--no-build-isolation", "--wheel-dir", str(tmp_path / "dist"), str(src))
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (tmp_path / "dist").glob("policy_scheduler-*.whl")
    assert wheel.name.startswith(f"policy_scheduler-{PYPROJECT['project']['version']}-py3-none-any")

    # a clean venv, without pip: the suite's pip installs into it (--python), as the Dockerfile does;
    # --no-compile only to be quick (the image compiles)
    venv = tmp_path / "venv"
    made = _run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    install = ("--python", str(py), "install", "-q", "--no-compile", "--require-hashes",
               "--no-index", "--find-links", str(WHEELHOUSE), "-r", str(RUNTIME))
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    done = _pip(*install)
    if done.returncode != 0:  # files of the lock not fetched yet: from PyPI, hash-checked, then again
        fetched = _pip("download", "-q", "--require-hashes", "--only-binary=:all:", "--dest", str(WHEELHOUSE),
                       "-r", str(RUNTIME))
        assert fetched.returncode == 0, f"fetching the lock's files from PyPI:\n{fetched.stderr}"
        done = _pip(*install)
    assert done.returncode == 0, done.stdout + done.stderr
    added = _pip("--python", str(py), "install", "-q", "--no-compile", "--no-deps", "--no-index", str(wheel))
    assert added.returncode == 0, added.stdout + added.stderr
    checked = _pip("--python", str(py), "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr

    # run from elsewhere, so that nothing of this tree can be imported instead
    where = _run(py, "-c", "import policy_scheduler; print(policy_scheduler.__file__)", cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout
    version = _run(venv / "bin" / "policy-scheduler", "--version", cwd=tmp_path)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"policy-scheduler {PYPROJECT['project']['version']}"
    crd = _run(venv / "bin" / "policy-scheduler", "crd", cwd=tmp_path)
    assert crd.returncode == 0, crd.stderr
    assert crd.stdout == (ROOT / "crds" / "schedulingpolicies.yaml").read_text()
    assert (venv / "bin" / "kubectl-policy_scheduler").exists()  # the kubectl plugin's name


def _installed(dist: str) -> bool:
    try:
        metadata.version(dist)
        return True
    except metadata.PackageNotFoundError:
        return False
