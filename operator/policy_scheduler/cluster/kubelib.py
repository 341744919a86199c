"""The ``kubernetes`` library's kubeconfig and in-cluster loaders, without what they do not use.

``import kubernetes`` runs the package's ``__init__``, which imports its watch, stream, dynamic,
informer and leader-election modules, and ``kubernetes.config.kube_config`` imports the generated
client's ``ApiClient`` (pydantic and the API response machinery) for functions this operator never
calls. On a 2-core machine that is about 0.2 s of the operator's start-up, on the way to its first
decision, for credentials that need none of it.

``install()`` (called by credentials.py before it imports the loaders):

- puts the ``kubernetes`` package in ``sys.modules`` without running its ``__init__``; the first
  attribute it lacks (``kubernetes.watch``, ``kubernetes.__version__``, ...) runs the real
  ``__init__`` then (``complete``), so a later ``from kubernetes import ...`` gets the whole
  library, with the modules already loaded reused (one ``Configuration`` class);
- imports the loaders while ``kubernetes.client.ApiClient`` is a stand-in whose construction makes
  the real one; then takes the stand-in away again, so ``kubernetes.client.ApiClient`` is the real
  class for every other reader (kube_config keeps the stand-in for its ``new_client_from_config``).

- imports them while ``oauthlib`` and ``requests_oauthlib`` (kube_config imports them at its top,
  for the refresh of an OIDC auth-provider token only: with ``requests``, about 0.08 s) are
  stand-ins (``Deferred``) that import the real module on first use, and leave ``sys.modules``
  again once the loaders are in: any other importer gets the real module.

Nothing is done when the library is imported already, and the stand-in only replaces a name the
client package does not hold yet (versions whose client imports everything eagerly keep theirs);
a module imported already is used as it is.
tests/unit/cluster/test_kubelib.py checks both orders in fresh interpreters.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

_lock = threading.RLock()


class ApiClient:
    """kube_config's ``ApiClient`` until one is made: the real class, imported then."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.api_client import ApiClient as real

        return real(*args, **kwargs)


class Deferred(types.ModuleType):
    """A module kube_config names, until it is used: then the real module's attribute (or, for a
    package, its submodule) is imported and returned."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        real = importlib.import_module(self.__name__)
        try:
            return getattr(real, name)
        except AttributeError:
            return importlib.import_module(f"{self.__name__}.{name}")


class OAuth2Session:
    """kube_config's ``requests_oauthlib.OAuth2Session``: the real class, imported when one is made."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from requests_oauthlib import OAuth2Session as real

        return real(*args, **kwargs)


DEFERRED = ("oauthlib", "oauthlib.oauth2", "requests_oauthlib")


def _defer() -> list[tuple[str, types.ModuleType]]:
    """Stand-ins in sys.modules for the modules of DEFERRED not imported yet."""
    placed = []
    installed = {top: top in sys.modules or importlib.util.find_spec(top) is not None
                 for top in {name.partition(".")[0] for name in DEFERRED}}
    for name in DEFERRED:
        if name in sys.modules or not installed[name.partition(".")[0]]:
            continue
        mod = Deferred(name)
        if name == "requests_oauthlib":
            mod.__dict__["OAuth2Session"] = OAuth2Session
        parent, _, child = name.rpartition(".")
        if parent and isinstance(sys.modules.get(parent), Deferred):
            sys.modules[parent].__dict__[child] = mod
        sys.modules[name] = mod
        placed.append((name, mod))
    return placed


def _undefer(placed: list[tuple[str, types.ModuleType]]) -> None:
    for name, mod in placed:
        if sys.modules.get(name) is mod:
            del sys.modules[name]


def install() -> bool:
    """The loaders imported as the module docstring says; True when this call did it (False: the
    library, or the loaders, were imported already, or the package cannot be found)."""
    with _lock:
        if "kubernetes" in sys.modules:
            return False
        spec = importlib.util.find_spec("kubernetes")
        if spec is None or spec.loader is None or not spec.submodule_search_locations:
            return False
        pkg = importlib.util.module_from_spec(spec)  # not executed yet
        done: list[bool] = []

        def complete() -> None:
            with _lock:
                if done:
                    return
                done.append(True)
                spec.loader.exec_module(pkg)  # type: ignore[union-attr]

        def __getattr__(name: str) -> Any:
            if name.startswith("__") and name.endswith("__") and name not in ("__version__", "__all__"):
                raise AttributeError(name)  # copy, pickle and inspect probe dunders: no completion for them
            complete()
            try:
                return pkg.__dict__[name]
            except KeyError:
                raise AttributeError(f"module 'kubernetes' has no attribute {name!r}") from None

        pkg.__getattr__ = __getattr__  # type: ignore[method-assign]
        sys.modules["kubernetes"] = pkg
        try:
            client = importlib.import_module("kubernetes.client")
            pkg.client = client  # type: ignore[attr-defined]
            stand_in = "ApiClient" not in client.__dict__
            if stand_in:
                client.__dict__["ApiClient"] = ApiClient
            deferred = _defer()
            try:
                importlib.import_module("kubernetes.config.kube_config")
                importlib.import_module("kubernetes.config.incluster_config")
            finally:
                _undefer(deferred)
                if stand_in and client.__dict__.get("ApiClient") is ApiClient:
                    del client.__dict__["ApiClient"]
        except BaseException:
            if sys.modules.get("kubernetes") is pkg:  # as if nothing happened: a plain import next time
                for name in [n for n in sys.modules if n == "kubernetes" or n.startswith("kubernetes.")]:
                    del sys.modules[name]
            raise
        return True
