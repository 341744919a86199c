"""cluster/credentials.py: kubeconfig resolution as kubectl does it ($KUBECONFIG
merged, ~/.kube/config, --context), relative paths, exec credential plugins and token renewal.
Temporary files only: no API server."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import sys
import time
from pathlib import Path

import pytest

from policy_scheduler import cli
from policy_scheduler.cluster import credentials
from policy_scheduler.cluster.credentials import CredentialsError, client_configuration, load_credentials


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No $KUBECONFIG, a HOME without .kube/config, not in a pod."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def kubeconfig(path: Path, clusters: dict, users: dict, contexts: dict, current: str | None = None) -> Path:
    """contexts: name -> (cluster, user)."""
    cfg = {"apiVersion": "v1", "kind": "Config",
           "clusters": [{"name": n, "cluster": c} for n, c in clusters.items()],
           "users": [{"name": n, "user": u} for n, u in users.items()],
           "contexts": [{"name": n, "context": {"cluster": c, "user": u}} for n, (c, u) in contexts.items()]}
    if current:
        cfg["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg))
    return path


def simple(path: Path, server: str = "https://a.example:6443", token: str = "tok-a", name: str = "a") -> Path:
    return kubeconfig(path, {name: {"server": server, "insecure-skip-tls-verify": True}}, {name: {"token": token}},
                      {name: (name, name)}, current=name)


def exec_plugin(path: Path, body: str) -> Path:
    """A tiny exec credential plugin: Python ``body`` with ``calls`` (its run count, kept next to it)."""
    path.write_text(f"#!{sys.executable}\n"
                    "import datetime, json, pathlib, sys\n"
                    f"counter = pathlib.Path({str(path)!r} + '.calls')\n"
                    "calls = int(counter.read_text()) + 1 if counter.exists() else 1\n"
                    "counter.write_text(str(calls))\n" + body)
    path.chmod(0o755)
    return path


def calls(plugin: Path) -> int:
    counter = Path(str(plugin) + ".calls")
    return int(counter.read_text()) if counter.exists() else 0


def exec_user(plugin: Path) -> dict:
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                     "args": ["--flag"], "interactiveMode": "Never"}}


TOKEN_PLUGIN = """
status = {"token": f"exec-token-{calls}"}
if len(sys.argv) > 2:  # a lifetime in seconds
    exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=float(sys.argv[2]))
    status["expirationTimestamp"] = exp.strftime("%Y-%m-%dT%H:%M:%SZ")
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status}))
"""


# ----------------------------------------------------------------------------- resolution

def test_explicit_kubeconfig_wins_over_env_and_home(tmp_path, monkeypatch, clean_env):
    flag = simple(tmp_path / "flag.yaml", "https://flag.example", "tok-flag")
    env = simple(tmp_path / "env.yaml", "https://env.example", "tok-env")
    simple(clean_env / ".kube" / "config", "https://home.example", "tok-home")
    monkeypatch.setenv("KUBECONFIG", str(env))
    c = load_credentials(flag)
    assert (c.server, c.auth_header()) == ("https://flag.example", {"Authorization": "Bearer tok-flag"})
    c = load_credentials()
    assert (c.server, c.auth_header()) == ("https://env.example", {"Authorization": "Bearer tok-env"})
    monkeypatch.delenv("KUBECONFIG")
    c = load_credentials()
    assert (c.server, c.auth_header()) == ("https://home.example", {"Authorization": "Bearer tok-home"})
    assert c.source == f"kubeconfig {clean_env / '.kube' / 'config'}, context a"


def test_kubeconfig_paths_merge_the_first_file_wins(tmp_path, monkeypatch):
    a = kubeconfig(tmp_path / "a" / "config",
                   {"shared": {"server": "https://first.example"}},
                   {"alice": {"token": "tok-alice"}},
                   {"ctx-a": ("shared", "alice")}, current="ctx-a")
    b = kubeconfig(tmp_path / "b" / "config",
                   {"shared": {"server": "https://second.example"}, "other": {"server": "https://other.example"}},
                   {"alice": {"token": "overridden"}, "bob": {"token": "tok-bob"}},
                   {"ctx-a": ("other", "bob"), "ctx-b": ("other", "bob")}, current="ctx-b")
    monkeypatch.setenv("KUBECONFIG", f"{a}:{tmp_path / 'missing'}:{b}")  # a missing file is skipped
    c = load_credentials()  # current-context of the first file that sets one; entries of the first file
    assert (c.server, c.authorization) == ("https://first.example", "Bearer tok-alice")
    assert c.source == f"kubeconfig {a}:{b}, context ctx-a"
    c = load_credentials(context="ctx-b")  # what only the second file has is there too
    assert (c.server, c.authorization) == ("https://other.example", "Bearer tok-bob")
    # a first file without current-context leaves it to the next
    kubeconfig(a, {"shared": {"server": "https://first.example"}}, {"alice": {"token": "tok-alice"}},
               {"ctx-a": ("shared", "alice")})
    assert load_credentials().server == "https://other.example"


def test_context_selection_and_unknown_context(tmp_path):
    path = kubeconfig(tmp_path / "config",
                      {"one": {"server": "https://one.example"}, "two": {"server": "https://two.example"}},
                      {"u": {"token": "t"}}, {"first": ("one", "u"), "second": ("two", "u")}, current="first")
    assert load_credentials(path).server == "https://one.example"
    assert load_credentials(path, "second").server == "https://two.example"
    with pytest.raises(CredentialsError) as e:
        load_credentials(path, "nope")
    assert str(e.value) == f"kubeconfig {path}: context 'nope' not found (contexts: first, second)"
    with pytest.raises(CredentialsError, match="context 'nope' not found"):
        client_configuration(path, "nope")


def test_no_current_context_asks_for_one(tmp_path):
    path = kubeconfig(tmp_path / "config", {"one": {"server": "https://one.example"}}, {"u": {"token": "t"}},
                      {"first": ("one", "u")})
    with pytest.raises(CredentialsError, match=r"no current-context; pick one with --context \(contexts: first\)"):
        load_credentials(path)


def test_missing_kubeconfig_errors(tmp_path, monkeypatch):
    with pytest.raises(CredentialsError, match=r"^kubeconfig .*/nowhere: no such file$"):
        load_credentials(tmp_path / "nowhere")
    with pytest.raises(CredentialsError, match=r"^no kubeconfig: pass --kubeconfig, set \$KUBECONFIG or create"):
        load_credentials()
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'x'}:{tmp_path / 'y'}")
    with pytest.raises(CredentialsError, match=r"^\$KUBECONFIG=.*: no such file$"):
        load_credentials()
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: [\n")
    with pytest.raises(CredentialsError) as e:
        load_credentials(bad)
    assert str(e.value).startswith(f"kubeconfig {bad}: ") and "\n" not in str(e.value)


@pytest.fixture(scope="module")
def pki() -> dict[str, bytes]:
    """A certificate and key (the webhooks' own maker, cluster/certs.py: no openssl needed)."""
    from policy_scheduler.cluster.certs import new_bundle

    b = new_bundle(["test.example"])
    return {"cert": b.cert, "key": b.key}


def test_relative_paths_resolve_against_the_kubeconfig_directory(tmp_path, monkeypatch, pki):
    d = tmp_path / "conf" / "sub"
    d.mkdir(parents=True)
    (d / "ca.crt").write_bytes(pki["cert"])
    (d / "client.crt").write_bytes(pki["cert"])
    (d / "client.key").write_bytes(pki["key"])
    (d / "token").write_text("tok-from-file\n")
    path = kubeconfig(d / "config", {"c": {"server": "https://c.example", "certificate-authority": "ca.crt"}},
                      {"u": {"client-certificate": "client.crt", "client-key": "./client.key", "tokenFile": "token"}},
                      {"ctx": ("c", "u")}, current="ctx")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    c = load_credentials(path)
    assert (c.ca_data, c.cert_data, c.key_data) == (pki["cert"], pki["cert"], pki["key"])
    assert isinstance(c.ssl_context, ssl.SSLContext) and c.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert c.authorization == "Bearer tok-from-file"


def test_relative_user_paths_resolve_against_the_users_own_file(tmp_path, monkeypatch, pki):
    """With $KUBECONFIG merging files from two directories, each entry's paths are relative to its file."""
    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "ca.crt").write_bytes(pki["cert"])
    (tmp_path / "users").mkdir()
    (tmp_path / "users" / "me.crt").write_bytes(pki["cert"])
    (tmp_path / "users" / "me.key").write_bytes(pki["key"])
    a = kubeconfig(tmp_path / "clusters" / "config",
                   {"c": {"server": "https://c.example", "certificate-authority": "ca.crt"}}, {},
                   {"ctx": ("c", "me")}, current="ctx")
    b = kubeconfig(tmp_path / "users" / "config", {}, {"me": {"client-certificate": "me.crt",
                                                              "client-key": "me.key"}}, {})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", f"{a}:{b}")
    c = load_credentials()
    assert (c.ca_data, c.cert_data, c.key_data) == (pki["cert"], pki["cert"], pki["key"])


def test_a_missing_certificate_file_is_named(tmp_path):
    path = kubeconfig(tmp_path / "config", {"c": {"server": "https://c.example", "certificate-authority": "ca.crt"}},
                      {"u": {"token": "t"}}, {"ctx": ("c", "u")}, current="ctx")
    with pytest.raises(CredentialsError, match=f"File does not exist: {tmp_path / 'ca.crt'}"):
        load_credentials(path)


# ----------------------------------------------------------------------------- exec plugins

def test_exec_plugin_gives_the_token(tmp_path):
    plugin = exec_plugin(tmp_path / "plugin", TOKEN_PLUGIN)
    path = kubeconfig(tmp_path / "config", {"c": {"server": "https://c.example", "insecure-skip-tls-verify": True}},
                      {"u": exec_user(plugin)}, {"ctx": ("c", "u")}, current="ctx")
    c = load_credentials(path)
    assert c.auth_header() == {"Authorization": "Bearer exec-token-1"}
    assert c.auth_header() == {"Authorization": "Bearer exec-token-1"}  # no expiry: not run again
    assert asyncio.run(c.auth_header_async()) == {"Authorization": "Bearer exec-token-1"}
    assert calls(plugin) == 1 and c.expiration is None


def test_an_expiring_exec_token_is_renewed(tmp_path):
    plugin = exec_plugin(tmp_path / "plugin", TOKEN_PLUGIN)
    user = exec_user(plugin)
    user["exec"]["args"] = ["--flag", "2"]  # tokens live 2 s: renewed after about 1 s
    path = kubeconfig(tmp_path / "config", {"c": {"server": "https://c.example", "insecure-skip-tls-verify": True}},
                      {"u": user}, {"ctx": ("c", "u")}, current="ctx")
    c = load_credentials(path)
    assert c.authorization == "Bearer exec-token-1"
    exp = c.expiration  # for kopf: log in again before the token expires
    assert exp is not None and 0 < exp.timestamp() - time.time() <= 2
    assert c.auth_header() == {"Authorization": "Bearer exec-token-1"} and calls(plugin) == 1  # not due yet
    time.sleep(max(0.0, exp.timestamp() - time.time()) + 0.1)
    assert c.auth_header() == {"Authorization": "Bearer exec-token-2"}  # the plugin ran again
    assert calls(plugin) == 2

    async def many():  # due again: concurrent requests share one renewal, run in a thread
        await asyncio.sleep(max(0.0, c.expiration.timestamp() - time.time()) + 0.1)
        return await asyncio.gather(*(c.auth_header_async() for _ in range(20)))

    assert all(h == {"Authorization": "Bearer exec-token-3"} for h in asyncio.run(many()))
    assert calls(plugin) == 3


def test_a_failing_exec_plugin_is_a_clear_error(tmp_path, caplog):
    plugin = exec_plugin(tmp_path / "login-helper", 'sys.stderr.write("error: not logged in\\nrun: cloud login\\n")\n'
                                                     "sys.exit(3)\n")
    path = kubeconfig(tmp_path / "config", {"c": {"server": "https://c.example"}}, {"u": exec_user(plugin)},
                      {"ctx": ("c", "u")}, current="ctx")
    with caplog.at_level(logging.DEBUG), pytest.raises(CredentialsError) as e:
        load_credentials(path)
    assert str(e.value) == (f"kubeconfig {path}, context ctx: exec plugin '{plugin}' failed: "
                            "process returned 3. error: not logged in run: cloud login")
    assert not caplog.records  # said once, in the error, not also logged by the library


def test_a_missing_exec_command_is_named(tmp_path):
    path = kubeconfig(tmp_path / "config", {"c": {"server": "https://c.example"}},
                      {"u": exec_user(tmp_path / "no-such-plugin")}, {"ctx": ("c", "u")}, current="ctx")
    with pytest.raises(CredentialsError, match=r"exec plugin '.*no-such-plugin' failed: .*No such file"):
        load_credentials(path)


def test_exec_plugin_without_a_credential_is_an_error(tmp_path):
    plugin = exec_plugin(tmp_path / "plugin", 'print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", '
                                              '"kind": "ExecCredential", "status": {}}))\n')
    path = kubeconfig(tmp_path / "config", {"c": {"server": "https://c.example"}}, {"u": exec_user(plugin)},
                      {"ctx": ("c", "u")}, current="ctx")
    with pytest.raises(CredentialsError, match="exec plugin .* failed: missing token or clientCertificateData"):
        load_credentials(path)


def test_a_failed_renewal_keeps_the_token_and_retries_later(tmp_path, caplog):
    plugin = exec_plugin(tmp_path / "plugin", """
if calls == 2:
    sys.stderr.write("transient failure")
    sys.exit(1)
""" + TOKEN_PLUGIN)
    user = exec_user(plugin)
    user["exec"]["args"] = ["--flag", "2"]
    path = kubeconfig(tmp_path / "config", {"c": {"server": "https://c.example", "insecure-skip-tls-verify": True}},
                      {"u": user}, {"ctx": ("c", "u")}, current="ctx")
    c = load_credentials(path)
    time.sleep(max(0.0, c.expiration.timestamp() - time.time()) + 0.1)
    with caplog.at_level(logging.ERROR, logger="policy_scheduler.cluster.kubeclient"):
        assert c.auth_header() == {"Authorization": "Bearer exec-token-1"}  # renewal failed: old token
    assert "transient failure" in caplog.text and calls(plugin) == 2
    assert c.auth_header() == {"Authorization": "Bearer exec-token-1"} and calls(plugin) == 2  # not at once
    c._renew_at = 0  # RETRY_PERIOD later
    assert c.auth_header() == {"Authorization": "Bearer exec-token-3"}


# ----------------------------------------------------------------------------- in-cluster

def test_in_cluster_service_account_token_is_read_again(tmp_path, monkeypatch, pki):
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token-1")
    (sa / "ca.crt").write_bytes(pki["cert"])
    monkeypatch.setattr(credentials.incluster_config, "SERVICE_TOKEN_FILENAME", str(sa / "token"))
    monkeypatch.setattr(credentials.incluster_config, "SERVICE_CERT_FILENAME", str(sa / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    c = load_credentials()
    assert (c.server, c.ca_data, c.source) == ("https://[fd00::1]:443", pki["cert"], "in-cluster service account")
    assert c.authorization == "bearer sa-token-1" and c.expiration is None  # kopf: again on 401 only
    (sa / "token").write_text("sa-token-2")  # the kubelet rotated it
    assert c.authorization == "bearer sa-token-1"  # read at most once a minute
    c.loader.token_expires_at = c.loader.token_expires_at.replace(year=2000)
    c._renew_at = 0
    assert c.authorization == "bearer sa-token-2"
    with pytest.raises(CredentialsError, match="context 'x': no kubeconfig"):
        load_credentials(context="x")


# ----------------------------------------------------------------------------- the commands

def test_run_exits_2_on_an_unknown_context(tmp_path, capsys, restore_logging):
    path = simple(tmp_path / "config")
    assert cli.main(["run", "--kubeconfig", str(path), "--context", "nope", "--metrics-port", "0",
                     "--health-port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"policy-scheduler: cannot load credentials: kubeconfig {path}: context 'nope' not found " \
                  "(contexts: a)"


def test_explain_reports_credential_errors(tmp_path, capsys, clean_env):
    assert cli.main(["explain", "default/p"]) == 1
    assert "cannot load credentials: no kubeconfig" in capsys.readouterr().err
    simple(clean_env / ".kube" / "config")
    assert cli.main(["explain", "default/p", "--context", "other"]) == 1
    assert "context 'other' not found (contexts: a)" in capsys.readouterr().err
