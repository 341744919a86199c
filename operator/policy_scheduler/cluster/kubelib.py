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

Nothing is done when the library is imported already, and the stand-in only replaces a name the
client package does not hold yet (versions whose client imports everything eagerly keep theirs).
tests/unit/cluster/test_kubelib.py checks both orders in fresh interpreters.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from typing import Any

_lock = threading.RLock()


class ApiClient:
    """kube_config's ``ApiClient`` until one is made: the real class, imported then."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.api_client import ApiClient as real

        return real(*args, **kwargs)


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
            try:
                importlib.import_module("kubernetes.config.kube_config")
                importlib.import_module("kubernetes.config.incluster_config")
            finally:
                if stand_in and client.__dict__.get("ApiClient") is ApiClient:
                    del client.__dict__["ApiClient"]
        except BaseException:
            if sys.modules.get("kubernetes") is pkg:  # as if nothing happened: a plain import next time
                for name in [n for n in sys.modules if n == "kubernetes" or n.startswith("kubernetes.")]:
                    del sys.modules[name]
            raise
        return True
