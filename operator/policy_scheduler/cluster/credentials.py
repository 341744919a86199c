"""Where to connect and how to authenticate: the kubeconfig and service-account resolution behind
the operator's own API client (cluster/kubeclient.py, which sends the requests) and behind the
commands that read a cluster through the generated clients (client_configuration).

Resolution is the ``kubernetes`` library's own loaders, as kubectl resolves it: ``--kubeconfig``,
else ``$KUBECONFIG`` (several files, merged: the first file to set a value wins), else
``~/.kube/config``, else the in-cluster service account; ``--context`` picks a context.
Credentials are client certificates, tokens, token files, exec credential plugins and auth
providers. A token that expires (an exec plugin's ``expirationTimestamp``, a token file, the
service account's token) is refreshed through the library's ``refresh_api_key_hook`` when due; the
async callers do that in a thread, since an exec plugin is a subprocess.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import math
import os
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .kubelib import install as _light_kubernetes

_light_kubernetes()  # the loaders without the rest of the library (kubelib.py): start-up time

from kubernetes.client import Configuration  # noqa: E402
from kubernetes.config import incluster_config  # noqa: E402
from kubernetes.config.config_exception import ConfigException  # noqa: E402
from kubernetes.config.kube_config import (ENV_KUBECONFIG_PATH_SEPARATOR, FileOrData, KubeConfigLoader,
                                           KubeConfigMerger)

# the logger these lines have always had (a log's `logger` field): the client's
log = logging.getLogger("policy_scheduler.cluster.kubeclient")

DEFAULT_KUBECONFIG = "~/.kube/config"
TOKEN_FILE_PERIOD = 60.0  # seconds a token read from a file is used before it is read again
EXPIRY_MARGIN = 300.0  # a token is renewed this long before it expires (at most half its remaining life)
RETRY_PERIOD = 10.0  # seconds before a failed renewal is tried again (the old token stays in use)


class CredentialsError(RuntimeError):
    """No usable kubeconfig / service account, an unknown context, a failing exec plugin: one line."""


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


@contextlib.contextmanager
def _library_errors():
    """Collect, and keep out of the logs, what the kubernetes library reports with
    ``logging.error`` in this thread: it logs a failing exec plugin instead of raising."""
    root = logging.getLogger()
    me = threading.get_ident()
    errors: list[str] = []

    def grab(record: logging.LogRecord) -> bool:
        if record.thread == me and record.name == "root" and record.levelno >= logging.ERROR:
            errors.append(record.getMessage())
            return False
        return True

    null = logging.NullHandler()  # so that logging.error() does not call basicConfig() on an empty root
    root.addFilter(grab)
    root.addHandler(null)
    try:
        yield errors
    finally:
        root.removeFilter(grab)
        root.removeHandler(null)


class _KubeConfigLoader(KubeConfigLoader):
    """The library's kubeconfig loader, with three corrections: a failing exec plugin is an error
    (the library logs it and goes on unauthenticated), a ``tokenFile`` is read again every
    TOKEN_FILE_PERIOD (as client-go does), and a user's relative client-certificate / client-key
    paths resolve against the directory of the file that defines the user (the library takes the
    cluster's file, which differs when $KUBECONFIG merges several files)."""

    token_from_file = False

    def _load_from_exec_plugin(self):
        if "exec" not in self._user:
            return None
        with _library_errors() as errors:
            ok = super()._load_from_exec_plugin()
        if not ok:
            cmd = self._user["exec"].safe_get("command")
            why = "; ".join(e.removeprefix("exec: ") for e in errors) or "no token or certificate in its output"
            raise ConfigException(f"exec plugin {cmd!r} failed: {why}")
        return ok

    def _load_user_token(self):
        ok = super()._load_user_token()
        self.token_from_file = bool(ok and not self._user.safe_get("token") and self._user.safe_get("tokenFile"))
        if self.token_from_file:
            # an expiry makes the library's refresh hook read the file again once it is due
            self.expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=TOKEN_FILE_PERIOD)
        return ok

    def _load_cluster_info(self):
        if (self._user and "cert_file" not in self.__dict__
                and str(self._cluster.safe_get("server") or "").startswith("https")):
            base = self._get_base_path(self._user.path)
            self.cert_file = FileOrData(self._user, "client-certificate", file_base_path=base,
                                        temp_file_path=self._temp_file_path).as_file()
            self.key_file = FileOrData(self._user, "client-key", file_base_path=base,
                                       temp_file_path=self._temp_file_path).as_file()
        super()._load_cluster_info()


def _names(items) -> list[str]:
    return [str(i["name"]) for i in items or [] if "name" in i]


def _load_kubeconfig(paths: list[str], context: str | None, cfg: Configuration) -> tuple[KubeConfigLoader, str]:
    where = "kubeconfig " + ENV_KUBECONFIG_PATH_SEPARATOR.join(paths)
    try:
        merged = KubeConfigMerger(ENV_KUBECONFIG_PATH_SEPARATOR.join(paths))
    except Exception as e:  # unreadable file, invalid YAML, an empty file
        raise CredentialsError(f"{where}: {_one_line(e)}") from None
    if merged.config is None:
        raise CredentialsError(f"{where}: no configuration found")
    contexts = _names(merged.config.value.get("contexts"))
    if context is None:
        # kubectl: the first file that sets current-context wins (the library takes the last one)
        context = next((c for c in (merged.config_files[p].get("current-context") for p in merged.paths) if c), None)
        if not context:
            raise CredentialsError(f"{where}: no current-context; pick one with --context "
                                   f"(contexts: {', '.join(contexts) or 'none'})")
    if context not in contexts:
        raise CredentialsError(f"{where}: context {context!r} not found (contexts: {', '.join(contexts) or 'none'})")
    where += f", context {context}"
    try:
        loader = _KubeConfigLoader(merged.config, active_context=context, config_base_path=None,
                                   config_persister=merged.save_changes)
        loader.load_and_set(cfg)
    except Exception as e:
        raise CredentialsError(f"{where}: {_one_line(e)}") from None
    user = loader._user
    if user and "auth-provider" in user and "token" not in loader.__dict__:
        name = user["auth-provider"].safe_get("name")
        raise CredentialsError(f"{where}: auth-provider {name!r} gave no token")
    return loader, where


def _load_incluster(cfg: Configuration) -> incluster_config.InClusterConfigLoader:
    loader = incluster_config.InClusterConfigLoader(token_filename=incluster_config.SERVICE_TOKEN_FILENAME,
                                                    cert_filename=incluster_config.SERVICE_CERT_FILENAME)
    try:
        loader.load_and_set(cfg)
    except Exception as e:
        raise CredentialsError(f"in-cluster service account: {_one_line(e)}") from None
    return loader


def _resolve(kubeconfig: str | os.PathLike | None, context: str | None, cfg: Configuration):
    """Fill ``cfg`` from the first source that exists; return (loader, description)."""
    if kubeconfig:
        path = Path(kubeconfig).expanduser()
        if not path.is_file():
            raise CredentialsError(f"kubeconfig {path}: no such file")
        return _load_kubeconfig([str(path)], context, cfg)
    env = os.environ.get("KUBECONFIG", "")
    if env:
        listed = [os.path.expanduser(p) for p in env.split(ENV_KUBECONFIG_PATH_SEPARATOR) if p]
        paths = [p for p in listed if os.path.exists(p)]
        if not paths:
            raise CredentialsError(f"$KUBECONFIG={env}: no such file")
        return _load_kubeconfig(paths, context, cfg)
    default = os.path.expanduser(DEFAULT_KUBECONFIG)
    if os.path.exists(default):
        return _load_kubeconfig([default], context, cfg)
    if os.environ.get(incluster_config.SERVICE_HOST_ENV_NAME):
        if context:
            raise CredentialsError(f"context {context!r}: no kubeconfig (--kubeconfig, $KUBECONFIG, "
                                   f"{DEFAULT_KUBECONFIG}) to look it up in")
        return _load_incluster(cfg), "in-cluster service account"
    raise CredentialsError(f"no kubeconfig: pass --kubeconfig, set $KUBECONFIG or create {DEFAULT_KUBECONFIG} "
                           "(or run in a pod with a service account)")


def kubeconfig_contexts(kubeconfig: str | os.PathLike | None = None) -> list[str]:
    """The context names of the kubeconfig ``load_credentials`` would read (files merged as
    kubectl merges them); [] in a pod without a kubeconfig. Raises CredentialsError."""
    if kubeconfig:
        path = Path(kubeconfig).expanduser()
        if not path.is_file():
            raise CredentialsError(f"kubeconfig {path}: no such file")
        paths = [str(path)]
    elif os.environ.get("KUBECONFIG", ""):
        paths = [p for p in (os.path.expanduser(x) for x in os.environ["KUBECONFIG"].split(ENV_KUBECONFIG_PATH_SEPARATOR)
                             if x) if os.path.exists(p)]
    else:
        default = os.path.expanduser(DEFAULT_KUBECONFIG)
        paths = [default] if os.path.exists(default) else []
    if not paths:
        return []
    try:
        merged = KubeConfigMerger(ENV_KUBECONFIG_PATH_SEPARATOR.join(paths))
    except Exception as e:
        raise CredentialsError(f"kubeconfig {ENV_KUBECONFIG_PATH_SEPARATOR.join(paths)}: {_one_line(e)}") from None
    return _names(merged.config.value.get("contexts")) if merged.config is not None else []


def client_configuration(kubeconfig: str | os.PathLike | None = None,
                         context: str | None = None) -> Configuration:
    """A ``kubernetes.client.Configuration`` for the generated clients (``ApiClient(cfg)``),
    resolved as :func:`load_credentials` resolves it, token refresh included."""
    cfg = Configuration()
    _resolve(kubeconfig, context, cfg)
    return cfg


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def _expiry_epoch(loader) -> float | None:
    """When the current token expires (unix time), if it does: the library keeps that as
    ``expiry`` (exec plugins, auth providers, our token files) or ``token_expires_at``
    (in-cluster: naive local time, a minute after the file was read)."""
    exp = loader.__dict__.get("expiry")
    if isinstance(exp, datetime.datetime):
        return exp.timestamp()  # the library's are timezone-aware
    exp = loader.__dict__.get("token_expires_at")
    if isinstance(exp, datetime.datetime):
        return exp.timestamp()
    return None


def _renew_at(expires: float | None, now: float) -> float:
    if expires is None:
        return math.inf
    left = expires - now
    if left <= 0:  # renewal gave an expired token (or failed): try again, but not on every request
        return now + RETRY_PERIOD
    return expires - min(EXPIRY_MARGIN, left / 2)


@dataclass(eq=False)
class Credentials:
    """Server URL, TLS context and the Authorization header for our aiohttp client.

    ``auth_header()`` is a dict lookup unless the token is due for renewal; then it runs the
    library's refresh hook (which may run an exec plugin). Async code calls
    ``await auth_header_async()``, which does that renewal in a thread.
    """

    server: str
    ssl_context: ssl.SSLContext | bool
    token: str | None = None  # a static bearer token (when not loaded from a kubeconfig)
    namespace: str | None = None
    ca_data: bytes | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = None
    insecure: bool = False
    source: str = ""  # e.g. "kubeconfig /home/me/.kube/config, context kind"
    config: Configuration | None = None  # the library's configuration, with its refresh hook
    loader: Any = None
    _header: dict[str, str] = field(default_factory=dict)
    _renew_at: float = math.inf
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # one asyncio.Lock per event loop: the leader election's thread runs a loop of its own
    _alocks: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.token and not self._header:
            self._header = {"Authorization": f"Bearer {self.token}"}

    # -- the token -------------------------------------------------------------------------
    @property
    def authorization(self) -> str | None:
        """The Authorization header value ("Bearer ...", "Basic ..."), renewed if due."""
        return self.auth_header().get("Authorization")

    @property
    def expiration(self) -> datetime.datetime | None:
        """When the current token should be replaced (its expiry less a margin), if it expires
        by itself: exec plugins and auth providers. Token files are re-read in place instead."""
        loader = self.loader
        if loader is None or getattr(loader, "token_from_file", False) or "expiry" not in loader.__dict__:
            return None
        if not math.isfinite(self._renew_at):
            return None
        return datetime.datetime.fromtimestamp(self._renew_at, datetime.timezone.utc)

    def renewal_due(self) -> bool:
        return time.time() >= self._renew_at

    def _take_token(self) -> None:
        """Copy the token out of the library's configuration; schedule the next renewal."""
        cfg = self.config
        if cfg is None:
            return
        key = cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization")
        if key:
            prefix = cfg.api_key_prefix.get("BearerToken")
            value = f"{prefix} {key}" if prefix else key
            self._header = {"Authorization": value.strip()}
        if cfg.refresh_api_key_hook is not None:
            self._renew_at = _renew_at(_expiry_epoch(self.loader), time.time())

    def renew(self) -> None:
        """Run the library's refresh hook if renewal is due (blocking: it may run an exec plugin).
        A failure is logged and the current token kept; it is tried again after RETRY_PERIOD."""
        with self._lock:
            if not self.renewal_due() or self.config is None or self.config.refresh_api_key_hook is None:
                return
            try:
                self.config.refresh_api_key_hook(self.config)
            except Exception as e:
                self._renew_at = time.time() + RETRY_PERIOD
                log.error("cannot renew the API token (%s): %s", self.source or self.server, _one_line(e))
                return
            self._take_token()

    def auth_header(self) -> dict[str, str]:
        if time.time() >= self._renew_at:
            self.renew()
        return dict(self._header)

    async def auth_header_async(self) -> dict[str, str]:
        """``auth_header()`` for the event loop: a renewal runs in a thread, one at a time."""
        if time.time() >= self._renew_at:
            loop = asyncio.get_running_loop()
            alock = self._alocks.get(loop)
            if alock is None:  # (not self._lock: renew() holds it while an exec plugin runs)
                for old in [lp for lp in list(self._alocks) if lp.is_closed()]:
                    self._alocks.pop(old, None)
                alock = self._alocks.setdefault(loop, asyncio.Lock())
            async with alock:
                if self.renewal_due():
                    await asyncio.to_thread(self.renew)
        return dict(self._header)


def _ssl_context(cfg: Configuration) -> ssl.SSLContext | bool:
    if not cfg.host.startswith("https"):
        return True
    if cfg.verify_ssl:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
    else:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file and cfg.key_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


def load_credentials(kubeconfig: str | os.PathLike | None = None, context: str | None = None) -> Credentials:
    """Credentials (server, TLS context, token) for our aiohttp client, resolved as kubectl does
    (see the module docstring). Raises CredentialsError with a one-line reason."""
    cfg = Configuration()
    loader, source = _resolve(kubeconfig, context, cfg)
    for setting, key in (("tls-server-name", "tls_server_name"), ("proxy-url", "proxy")):
        if loader.__dict__.get(key):
            raise CredentialsError(f"{source}: {setting} is not supported")
    try:
        creds = Credentials(
            server=cfg.host.rstrip("/"), ssl_context=_ssl_context(cfg),
            namespace=(loader.current_context["context"].get("namespace")
                       if isinstance(loader, KubeConfigLoader) else None),
            ca_data=_read(cfg.ssl_ca_cert), cert_data=_read(cfg.cert_file), key_data=_read(cfg.key_file),
            insecure=not cfg.verify_ssl, source=source, config=cfg, loader=loader)
    except (OSError, ssl.SSLError) as e:
        raise CredentialsError(f"{source}: {_one_line(e)}") from None
    creds._take_token()
    return creds
