"""cluster/kubeconfig_guard.py: every refusal rule on a table of hostile kubeconfigs, with proof
that a refused one reads no file and starts no process, and that an accepted one gives a client
built from its inline data only."""

from __future__ import annotations

import base64
import copy
import json
import os
import ssl
import subprocess

import pytest
import yaml

from policy_scheduler.cluster import kubeconfig_guard as guard
from policy_scheduler.cluster.certs import make_ca, make_serving

CA, CA_KEY = make_ca()
CERT, KEY = make_serving(CA, CA_KEY, ["client"])
b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731


def good() -> dict:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "w1",
            "clusters": [{"name": "w1", "cluster": {"server": "https://10.0.0.1:6443",
                                                    "certificate-authority-data": b64(CA)}}],
            "users": [{"name": "w1", "user": {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)}}],
            "contexts": [{"name": "w1", "context": {"cluster": "w1", "user": "w1", "namespace": "team"}}]}


def with_(path: str, value, base: dict | None = None) -> dict:
    """good() with ``value`` set at ``path`` (keys and list indexes separated by dots); None deletes."""
    cfg = copy.deepcopy(base or good())
    *head, last = path.split(".")
    obj = cfg
    for k in head:
        obj = obj[int(k)] if isinstance(obj, list) else obj[k]
    if value is None:
        del obj[last]
    else:
        obj[last] = value
    return cfg


EXEC = {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh", "args": ["-c", "touch /tmp/pwned"]}
HOSTILE = [
    # credentials that are code or files
    (with_("users.0.user.exec", EXEC), "ExecPlugin", "users[0].user.exec"),
    (with_("users.0.user.auth-provider", {"name": "oidc", "config": {}}), "AuthProvider", "users[0].user.auth-provider"),
    (with_("users.0.user.tokenFile", "/var/run/secrets/kubernetes.io/serviceaccount/token"), "TokenFile",
     "users[0].user.tokenFile"),
    (with_("users.0.user.client-certificate", "/etc/passwd"), "FileReference", "users[0].user.client-certificate"),
    (with_("users.0.user.client-key", "/etc/shadow"), "FileReference", "users[0].user.client-key"),
    (with_("clusters.0.cluster.certificate-authority", "/etc/ssl/ca.pem"), "FileReference",
     "clusters[0].cluster.certificate-authority"),
    # transport
    (with_("clusters.0.cluster.insecure-skip-tls-verify", True,
           with_("clusters.0.cluster.certificate-authority-data", None)), "InsecureTLS",
     "clusters[0].cluster.insecure-skip-tls-verify"),
    (with_("clusters.0.cluster.server", "http://10.0.0.1:8080"), "NotHTTPS", "clusters[0].cluster.server"),
    (with_("clusters.0.cluster.server", "HTTP://10.0.0.1"), "NotHTTPS", "clusters[0].cluster.server"),
    (with_("clusters.0.cluster.server", "unix:///var/run/docker.sock"), "NotHTTPS", "clusters[0].cluster.server"),
    (with_("clusters.0.cluster.server", "10.0.0.1:6443"), "NotHTTPS", "clusters[0].cluster.server"),
    (with_("clusters.0.cluster.proxy-url", "socks5://attacker:1080"), "ProxyURL", "clusters[0].cluster.proxy-url"),
    (with_("clusters.0.cluster.server", "https://user:pw@10.0.0.1"), "UserinfoInURL", "clusters[0].cluster.server"),
    (with_("clusters.0.cluster.server", "https://evil.example@10.0.0.1"), "UserinfoInURL",
     "clusters[0].cluster.server"),
    (with_("clusters.0.cluster.server", "https://10.0.0.1/?x=1"), "Malformed", "clusters[0].cluster.server"),
    (with_("clusters.0.cluster.server", "https://10.0.0.1:99999"), "Malformed", "clusters[0].cluster.server"),
    (with_("clusters.0.cluster.server", "https://10.0.0.1\r\nHost: x"), "Malformed", "clusters[0].cluster.server"),
    (with_("clusters.0.cluster.server", "https://"), "Malformed", "clusters[0].cluster.server"),
    (with_("clusters.0.cluster.server", 6443), "Malformed", "clusters[0].cluster.server"),
    # fields this client does not implement: refused rather than ignored
    (with_("users.0.user.username", "admin"), "UnsupportedField", "users[0].user.username"),
    (with_("users.0.user.as", "system:admin"), "UnsupportedField", "users[0].user.as"),
    (with_("clusters.0.cluster.tls-server-name", "kubernetes"), "UnsupportedField", "clusters[0].cluster.tls-server-name"),
    # a hostile entry that the context does not use is refused all the same
    ({**good(), "users": good()["users"] + [{"name": "spare", "user": {"exec": EXEC}}]}, "ExecPlugin",
     "users[1].user.exec"),
    ({**good(), "clusters": good()["clusters"] + [{"name": "plain", "cluster": {"server": "http://x"}}]},
     "NotHTTPS", "clusters[1].cluster.server"),
    # which context
    (with_("current-context", None, {**good(), "contexts": good()["contexts"] + [
        {"name": "w2", "context": {"cluster": "w1", "user": "w1"}}]}), "Ambiguous", "current-context"),
    (with_("current-context", "nope"), "Ambiguous", "current-context"),
    (with_("contexts.0.context.cluster", "nope"), "Ambiguous", "contexts[0].context.cluster"),
    (with_("contexts.0.context.user", "nope"), "Ambiguous", "contexts[0].context.user"),
    ({**good(), "users": [copy.deepcopy(u) for u in good()["users"] * 2]}, "Ambiguous", "users"),
    # data
    (with_("users.0.user.client-key-data", None), "Malformed", "users['w1'].user"),
    (with_("users.0.user.client-key-data", "not base64!"), "Malformed", "users['w1'].user.client-key-data"),
    (with_("clusters.0.cluster.certificate-authority-data", b64(b"hello")), "InvalidCertificate",
     "clusters['w1'].cluster.certificate-authority-data"),
    (with_("users.0.user.token", "abc def"), "Malformed", "users['w1'].user.token"),
    (with_("users.0.user.token", "abc\nX-Evil: 1"), "Malformed", "users['w1'].user.token"),
    (with_("users.0.user.token", 12345), "Malformed", "users['w1'].user.token"),
    (with_("clusters.0.cluster.insecure-skip-tls-verify", "yes"), "Malformed",
     "clusters[0].cluster.insecure-skip-tls-verify"),
    # shapes
    ({"clusters": "x"}, "Malformed", "clusters"),
    ({"clusters": [{"cluster": {}}]}, "Malformed", "clusters[0]"),
    ({"users": [{"name": "u", "user": ["x"]}]}, "Malformed", "users[0].user"),
    ([1, 2], "Malformed", ""),
    ("just a string", "Malformed", ""),
]


@pytest.mark.parametrize("cfg, reason, where", HOSTILE, ids=[f"{i}-{r}" for i, (_, r, _) in enumerate(HOSTILE)])
def test_each_hostile_kubeconfig_is_refused_with_its_reason_and_field(cfg, reason, where):
    for text in (json.dumps(cfg), yaml.safe_dump(cfg)):
        with pytest.raises(guard.KubeconfigRefused) as e:
            guard.validate(text)
        assert (e.value.reason, e.value.field) == (reason, where), str(e.value)
        assert e.value.reason in guard.REASONS


def test_a_good_kubeconfig_gives_its_inline_values():
    got = guard.validate(yaml.safe_dump(good()))
    assert (got.context, got.server, got.namespace, got.insecure) == ("w1", "https://10.0.0.1:6443", "team", False)
    assert (got.ca_pem, got.cert_pem, got.key_pem, got.token) == (CA, CERT, KEY, None)
    token = with_("users.0.user", {"token": "eyJhbGciOi.abc-_"})
    assert guard.validate(json.dumps(token)).token == "eyJhbGciOi.abc-_"
    one = with_("current-context", None)  # no current-context: the only context
    assert guard.validate(json.dumps(one)).context == "w1"
    # a path prefix is allowed (an API server behind a gateway); the trailing slash goes
    assert guard.validate(json.dumps(with_("clusters.0.cluster.server", "https://gw.example/k8s/w1/"))).server \
        == "https://gw.example/k8s/w1"


def test_insecure_tls_only_with_the_explicit_allowance():
    cfg = json.dumps(with_("clusters.0.cluster.insecure-skip-tls-verify", True,
                           with_("clusters.0.cluster.certificate-authority-data", None)))
    with pytest.raises(guard.KubeconfigRefused, match="--multikueue-allow-insecure-tls"):
        guard.validate(cfg)
    got = guard.validate(cfg, allow_insecure_tls=True)
    assert got.insecure
    ctx = guard.ssl_context(got)
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname
    # still https only
    with pytest.raises(guard.KubeconfigRefused) as e:
        guard.validate(json.dumps(with_("clusters.0.cluster.server", "http://x", json.loads(cfg))),
                       allow_insecure_tls=True)
    assert e.value.reason == "NotHTTPS"


def test_yaml_aliases_and_oversized_text_are_refused_before_they_expand():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n" + "".join(
        f"c{i}: &c{i} [" + ", ".join([f"*{'b' if i == 0 else f'c{i - 1}'}"] * 9) + "]\n" for i in range(9))
    with pytest.raises(guard.KubeconfigRefused) as e:
        guard.validate(bomb)
    assert (e.value.reason, str(e.value)) == ("Malformed", "YAML aliases are not accepted")
    with pytest.raises(guard.KubeconfigRefused) as e:
        guard.validate("x: " + "y" * guard.MAX_KUBECONFIG_BYTES)
    assert e.value.reason == "TooLarge"
    with pytest.raises(guard.KubeconfigRefused) as e:
        guard.validate("[" * 5000)
    assert e.value.reason == "Malformed"
    with pytest.raises(guard.KubeconfigRefused) as e:
        guard.validate("{a: !!python/object/apply:os.system [touch /tmp/x]}")
    assert e.value.reason == "Malformed"


def test_a_refused_kubeconfig_reads_no_file_and_starts_no_process(tmp_path, monkeypatch):
    """validate() is pure: with open(), os.open and subprocess made to fail, every hostile
    kubeconfig of the table is still refused, and the marker the exec plugin would write does not
    appear."""
    marker = tmp_path / "ran"
    cfg = with_("users.0.user.exec", {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh",
                                      "args": ["-c", f"touch {marker}"]})
    called = []

    def forbidden(*a, **k):
        called.append(a[:1])
        raise AssertionError(f"I/O during validation: {a[:1]}")

    import builtins

    for name, obj in (("open", builtins), ("Popen", subprocess)):
        monkeypatch.setattr(obj, name, forbidden)
    monkeypatch.setattr(os, "open", forbidden)
    for text, reason, _ in [(json.dumps(cfg), "ExecPlugin", "")] + [(json.dumps(c), r, w) for c, r, w in HOSTILE]:
        with pytest.raises(guard.KubeconfigRefused) as e:
            guard.validate(text)
        assert e.value.reason == reason
    assert called == [] and not marker.exists()


def test_the_client_is_built_from_inline_data_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    creds = guard.load(json.dumps(good()), "MultiKueueCluster w1")
    assert creds.server == "https://10.0.0.1:6443" and creds.source == "MultiKueueCluster w1"
    assert isinstance(creds.ssl_context, ssl.SSLContext) and creds.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert creds.config is None and creds.loader is None  # no library loader, no refresh hook: nothing re-run
    assert list(tmp_path.iterdir()) == []  # the client key went through an anonymous memory file
    token = guard.load(json.dumps(with_("users.0.user", {"token": "t0k3n"})), "w")
    assert token.auth_header() == {"Authorization": "Bearer t0k3n"}
    with pytest.raises(guard.KubeconfigRefused) as e:  # PEM markers, but not a key that loads
        guard.load(json.dumps(with_("users.0.user.client-key-data",
                                    b64(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))), "w")
    assert e.value.reason == "InvalidCertificate"


@pytest.mark.parametrize("location, ok", [
    ("worker-1", True), ("w1.example", True),
    ("../../kube-system/secrets/x", False), ("a/b", False), ("UPPER", False), ("", False), (None, False),
    ("x" * 254, False), ("-lead", False), ("a%2Fb", False), (["w"], False),
])
def test_a_secret_name_is_a_dns_1123_subdomain(location, ok):
    if ok:
        assert guard.secret_path("kueue-system", location) == f"/api/v1/namespaces/kueue-system/secrets/{location}"
    else:
        with pytest.raises(guard.KubeconfigRefused) as e:
            guard.secret_path("kueue-system", location)
        assert e.value.reason == "InvalidSecretName"
