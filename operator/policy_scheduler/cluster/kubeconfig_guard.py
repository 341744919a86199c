"""What a MultiKueue worker's kubeconfig may say, checked before anything in it is used.

A kubeconfig is code for a full client: ``exec`` runs a command, ``tokenFile`` and the path fields
read local files (the scheduler's own service-account token among them, then sent to whatever
server the file names), ``insecure-skip-tls-verify`` and ``http://`` give the credentials to
anyone on the path. Whoever can write a kubeconfig Secret in Kueue's namespace, or a
(cluster-scoped) MultiKueueCluster, would borrow the scheduler's trust. So the cluster chooser
(cluster/multikueue.py) accepts a worker's kubeconfig only as inline data, validated here as
plain data first: nothing is read from a file, no process is started and nothing is written
before :func:`validate` has accepted it, and the client is then built from the accepted values
(:func:`credentials`), never by the ``kubernetes`` library's loader.

Refused (each with a reason from a fixed vocabulary, :data:`REASONS`, and the field named):
``exec``, ``auth-provider``, ``tokenFile``, every path field (``certificate-authority``,
``client-certificate``, ``client-key``), ``insecure-skip-tls-verify: true`` (unless the operator
allows it: ``--multikueue-allow-insecure-tls``), a server that is not ``https://``, userinfo,
a query or a fragment in it, ``proxy-url``, and any other user or cluster field than the inline
ones (basic auth, impersonation, ``tls-server-name``). The context used is the
``current-context``, else the only one; its cluster and user must each be defined once. Every
cluster and user entry of the file is checked, used or not. YAML aliases are refused (no
"billion laughs"), and the text is at most :data:`MAX_KUBECONFIG_BYTES`.

Kueue validates the same Secrets itself (kubernetes-sigs/kueue#7439), but this chooser re-reads
them every refresh, in another process and with another identity: a Secret changed after Kueue
looked at it must not run here.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import quote, urlsplit

import orjson
import yaml

MAX_KUBECONFIG_BYTES = 256 * 1024  # a kubeconfig with a CA, a client certificate and key is ~10 KiB
MAX_DATA_BYTES = 64 * 1024  # one decoded *-data field
MAX_TOKEN_BYTES = 16 * 1024

# the condition reasons of a refused (or unusable) kubeconfig: the only words written where
# tenants can read them (the Workloads' cluster-scores record); the detail goes to the
# MultiKueueCluster's Event and the log
REASONS = frozenset({
    "ExecPlugin", "AuthProvider", "TokenFile", "FileReference", "InsecureTLS", "NotHTTPS", "ProxyURL",
    "UserinfoInURL", "UnsupportedField", "Ambiguous", "Malformed", "TooLarge", "InvalidCertificate",
    "InvalidSecretName", "PathLocation", "SecretNotFound", "SecretUnreadable", "NoKubeconfigKey", "LoadTimeout",
})

_USER_REFUSED = {"exec": "ExecPlugin", "auth-provider": "AuthProvider", "tokenFile": "TokenFile",
                 "client-certificate": "FileReference", "client-key": "FileReference"}
_USER_ALLOWED = {"token", "client-certificate-data", "client-key-data", "extensions"}
_CLUSTER_REFUSED = {"certificate-authority": "FileReference", "proxy-url": "ProxyURL"}
_CLUSTER_ALLOWED = {"server", "certificate-authority-data", "insecure-skip-tls-verify", "disable-compression",
                    "extensions"}
_TOKEN = re.compile(r"[\x21-\x7e]+")
# a Secret's name: a DNS-1123 subdomain (k8s.io/apimachinery/pkg/util/validation IsDNS1123Subdomain)
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class KubeconfigRefused(ValueError):
    """A kubeconfig (or where it comes from) that is not used: ``reason`` (one of REASONS) and
    ``field`` (where in the file), with a one-line ``why``."""

    def __init__(self, reason: str, field: str, why: str) -> None:
        assert reason in REASONS, reason
        self.reason, self.field, self.why = reason, field, why
        super().__init__(f"{field}: {why}" if field else why)


@dataclass(frozen=True)
class InlineKubeconfig:
    """The accepted values, and only those."""

    context: str
    server: str
    ca_pem: bytes | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    token: str | None = None
    insecure: bool = False
    namespace: str | None = None


def secret_path(namespace: str, location: Any) -> str:
    """The API path of a kubeconfig Secret, its name checked as a DNS-1123 subdomain and quoted
    (a name with ``/`` or ``..`` would otherwise leave Kueue's namespace)."""
    if not isinstance(location, str) or not location or len(location) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(location):
        raise KubeconfigRefused("InvalidSecretName", "spec.clusterSource.kubeConfig.location",
                                "not a Secret name (a DNS-1123 subdomain)")
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/secrets/{quote(location, safe='')}"


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases: a kubeconfig needs none, and an alias of an alias
    is how a few bytes expand to gigabytes."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise KubeconfigRefused("Malformed", "", "YAML aliases are not accepted")
        return super().compose_node(parent, index)


def _parse(text: str | bytes) -> Any:
    raw = text.encode() if isinstance(text, str) else bytes(text)
    if len(raw) > MAX_KUBECONFIG_BYTES:
        raise KubeconfigRefused("TooLarge", "", f"{len(raw)} bytes, more than {MAX_KUBECONFIG_BYTES}")
    if raw.lstrip()[:1] == b"{":  # JSON, as many tools write it
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # then YAML says what is wrong
    try:
        return yaml.load(raw.decode("utf-8"), Loader=_NoAliasLoader)  # noqa: S506 (a safe loader)
    except KubeconfigRefused:
        raise
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as e:
        raise KubeconfigRefused("Malformed", "", f"not YAML: {type(e).__name__}") from None


def _entries(cfg: Mapping[str, Any], key: str, inner: str) -> list[tuple[str, str, Mapping[str, Any]]]:
    items = cfg.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        raise KubeconfigRefused("Malformed", key, "not a list")
    out = []
    for i, it in enumerate(items):
        where = f"{key}[{i}]"
        if not isinstance(it, Mapping) or not isinstance(it.get("name"), str) or not it["name"]:
            raise KubeconfigRefused("Malformed", where, "not an object with a name")
        body = it.get(inner)
        if body is None:
            body = {}
        if not isinstance(body, Mapping):
            raise KubeconfigRefused("Malformed", f"{where}.{inner}", "not an object")
        out.append((it["name"], f"{where}.{inner}", body))
    names = [n for n, _, _ in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise KubeconfigRefused("Ambiguous", key, f"{dup!r} is defined more than once")
    return out


def _check_user(where: str, user: Mapping[str, Any]) -> None:
    for k in user:
        if k in _USER_REFUSED:
            raise KubeconfigRefused(_USER_REFUSED[k], f"{where}.{k}",
                                    {"ExecPlugin": "exec credential plugins are refused (inline token or "
                                                   "client certificate only)",
                                     "AuthProvider": "auth providers are refused (inline token or client "
                                                     "certificate only)",
                                     "TokenFile": "token files are refused (inline token only)",
                                     }.get(_USER_REFUSED[k], "file paths are refused (use the *-data field)"))
        if k not in _USER_ALLOWED:
            raise KubeconfigRefused("UnsupportedField", f"{where}.{str(k)[:64]}",
                                    "not accepted (inline token or client certificate only)")


def _check_cluster(where: str, cluster: Mapping[str, Any], allow_insecure_tls: bool) -> None:
    for k in cluster:
        if k in _CLUSTER_REFUSED:
            raise KubeconfigRefused(_CLUSTER_REFUSED[k], f"{where}.{k}",
                                    "file paths are refused (use certificate-authority-data)"
                                    if k == "certificate-authority" else "proxies are refused")
        if k not in _CLUSTER_ALLOWED:
            raise KubeconfigRefused("UnsupportedField", f"{where}.{str(k)[:64]}", "not accepted")
    insecure = cluster.get("insecure-skip-tls-verify")
    if insecure not in (None, True, False):
        raise KubeconfigRefused("Malformed", f"{where}.insecure-skip-tls-verify", "not a boolean")
    if insecure and not allow_insecure_tls:
        raise KubeconfigRefused("InsecureTLS", f"{where}.insecure-skip-tls-verify",
                                "TLS verification cannot be skipped (--multikueue-allow-insecure-tls)")
    _check_server(f"{where}.server", cluster.get("server"))


def _check_server(where: str, server: Any) -> str:
    if not isinstance(server, str) or not server or len(server) > 2048:
        raise KubeconfigRefused("Malformed", where, "not a URL")
    if any(ord(c) <= 0x20 or ord(c) == 0x7f for c in server):
        raise KubeconfigRefused("Malformed", where, "spaces or control characters in the URL")
    try:
        u = urlsplit(server)
        u.port  # noqa: B018 (raises ValueError for a port out of range)
    except ValueError:
        raise KubeconfigRefused("Malformed", where, "not a URL") from None
    if u.scheme.lower() != "https":
        raise KubeconfigRefused("NotHTTPS", where, "only https:// servers are accepted")
    if "@" in u.netloc:
        raise KubeconfigRefused("UserinfoInURL", where, "credentials in the URL are refused")
    if not u.hostname:
        raise KubeconfigRefused("Malformed", where, "no host")
    if u.query or u.fragment or "?" in server or "#" in server:
        raise KubeconfigRefused("Malformed", where, "a query or fragment in the server URL")
    return server.rstrip("/")


def _data(where: str, value: Any, pem: tuple[str, ...]) -> bytes | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_DATA_BYTES * 2:
        raise KubeconfigRefused("Malformed" if not isinstance(value, str) else "TooLarge", where,
                                "not a base64 string" if not isinstance(value, str) else "too long")
    try:
        out = base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigRefused("Malformed", where, "not base64") from None
    if len(out) > MAX_DATA_BYTES:
        raise KubeconfigRefused("TooLarge", where, f"more than {MAX_DATA_BYTES} bytes")
    if not any(m.encode() in out for m in pem):
        raise KubeconfigRefused("InvalidCertificate", where, "not PEM")
    return out


def validate(text: str | bytes, *, allow_insecure_tls: bool = False) -> InlineKubeconfig:
    """The kubeconfig's current context as inline values, or KubeconfigRefused. Pure: reads no
    file, starts nothing, writes nothing."""
    cfg = _parse(text)
    if not isinstance(cfg, Mapping):
        raise KubeconfigRefused("Malformed", "", "not a kubeconfig (an object)")
    clusters = _entries(cfg, "clusters", "cluster")
    users = _entries(cfg, "users", "user")
    contexts = _entries(cfg, "contexts", "context")
    for _, where, body in users:  # every entry, used or not: nothing of this kind belongs in the Secret
        _check_user(where, body)
    for _, where, body in clusters:
        _check_cluster(where, body, allow_insecure_tls)
    current = cfg.get("current-context")
    if current not in (None, "") and not isinstance(current, str):
        raise KubeconfigRefused("Malformed", "current-context", "not a string")
    if current:
        ctx = next(((n, w, b) for n, w, b in contexts if n == current), None)
        if ctx is None:
            raise KubeconfigRefused("Ambiguous", "current-context", "names no context of the file")
    elif len(contexts) == 1:
        ctx = contexts[0]
    else:
        raise KubeconfigRefused("Ambiguous", "current-context",
                                f"unset, and the file has {len(contexts)} contexts (exactly one is needed)")
    name, where, body = ctx
    cluster = next((b for n, _, b in clusters if n == body.get("cluster")), None)
    if cluster is None:
        raise KubeconfigRefused("Ambiguous", f"{where}.cluster", "names no cluster of the file")
    user: Mapping[str, Any] | None = {}
    if body.get("user"):
        user = next((b for n, _, b in users if n == body.get("user")), None)
        if user is None:
            raise KubeconfigRefused("Ambiguous", f"{where}.user", "names no user of the file")
    ns = body.get("namespace")
    if ns is not None and not isinstance(ns, str):
        raise KubeconfigRefused("Malformed", f"{where}.namespace", "not a string")
    cwhere = f"clusters[{body.get('cluster')!r}].cluster"
    uwhere = f"users[{body.get('user')!r}].user"
    token = user.get("token")
    if token is not None and (not isinstance(token, str) or len(token) > MAX_TOKEN_BYTES
                              or (token and not _TOKEN.fullmatch(token))):
        raise KubeconfigRefused("Malformed", f"{uwhere}.token", "not a bearer token")
    cert = _data(f"{uwhere}.client-certificate-data", user.get("client-certificate-data"), ("-----BEGIN CERTIFICATE-----",))
    key = _data(f"{uwhere}.client-key-data", user.get("client-key-data"), ("PRIVATE KEY-----",))
    if (cert is None) != (key is None):
        raise KubeconfigRefused("Malformed", uwhere, "client-certificate-data and client-key-data go together")
    insecure = bool(cluster.get("insecure-skip-tls-verify"))
    ca = _data(f"{cwhere}.certificate-authority-data", cluster.get("certificate-authority-data"),
               ("-----BEGIN CERTIFICATE-----",))
    if insecure and ca is not None:  # client-go: "specifying a root certificates file with the insecure flag is not allowed"
        raise KubeconfigRefused("Malformed", cwhere, "certificate-authority-data together with insecure-skip-tls-verify")
    return InlineKubeconfig(context=name, server=_check_server(f"{cwhere}.server", cluster.get("server")),
                            ca_pem=ca, cert_pem=cert, key_pem=key, token=token or None, insecure=insecure,
                            namespace=ns or None)


def _load_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl loads a client certificate only from files: from anonymous memory files where the
    platform has them (nothing on disk), else from a private temporary directory removed at once."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fds: list[int] = []
        try:
            for data in (cert, key):
                fd = os.memfd_create("policy-scheduler-worker", getattr(os, "MFD_CLOEXEC", 0))
                fds.append(fd)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            ctx.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="policy-scheduler-worker-") as d:
        paths = []
        for name, data in (("tls.crt", cert), ("tls.key", key)):
            p = os.path.join(d, name)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            paths.append(p)
        ctx.load_cert_chain(*paths)


def ssl_context(cfg: InlineKubeconfig) -> ssl.SSLContext:
    try:
        ctx = ssl.create_default_context(cadata=cfg.ca_pem.decode("ascii") if cfg.ca_pem else None)
        if cfg.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.cert_pem is not None and cfg.key_pem is not None:
            _load_chain(ctx, cfg.cert_pem, cfg.key_pem)
    except (ssl.SSLError, ValueError, UnicodeDecodeError) as e:
        raise KubeconfigRefused("InvalidCertificate", "", f"the CA, certificate or key does not load: "
                                f"{type(e).__name__}") from None
    return ctx


def credentials(cfg: InlineKubeconfig, source: str):
    """cluster.credentials.Credentials from the accepted values only (a static token, no refresh
    hook: nothing is ever run or re-read)."""
    from .credentials import Credentials

    return Credentials(server=cfg.server, ssl_context=ssl_context(cfg), token=cfg.token, namespace=cfg.namespace,
                       ca_data=cfg.ca_pem, cert_data=cfg.cert_pem, key_data=cfg.key_pem, insecure=cfg.insecure,
                       source=source)


def load(text: str | bytes, source: str, *, allow_insecure_tls: bool = False):
    """validate() then credentials(): blocking (a YAML parse, TLS set-up), run in a thread."""
    return credentials(validate(text, allow_insecure_tls=allow_insecure_tls), source)
