"""aiohttp, imported without reading the system's CA bundle on the way to the first decision.

``aiohttp.connector`` builds two TLS contexts when it is imported, for requests made without an
``ssl=`` argument, and both read the system's default CA paths: on a 2-core machine about 0.1 s of
the operator's start-up (two passes over ~150 certificates). This operator never uses them: every
session it opens (KubeClient's, kopf's) passes a context of its own, made from the kubeconfig.

``import_aiohttp()`` (cluster/__init__.py calls it, so it runs before any module here imports
aiohttp) imports aiohttp with OpenSSL's default paths (``SSL_CERT_FILE``, ``SSL_CERT_DIR``)
pointed at nothing, puts the two variables back as they were at once, and then loads the default
CAs into aiohttp's verified context on a thread (OpenSSL reads the files without the GIL, beside
the rest of the imports): a request made without ``ssl=`` still verifies against the system's CAs,
the same ones as before. The unverified context verifies nothing and is left without them. Nothing
is done when aiohttp is imported already. tests/unit/cluster/test_aiohttp_import.py checks it in
fresh interpreters.
"""

from __future__ import annotations

import os
import ssl
import sys
import threading

_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR")
_NOWHERE = os.path.join(os.sep, "nonexistent", "policy-scheduler-no-default-cas")
_loader: threading.Thread | None = None


def import_aiohttp() -> bool:
    """aiohttp imported as the module docstring says; True when this call imported it."""
    global _loader
    if "aiohttp" in sys.modules:
        return False
    saved = {k: os.environ.get(k) for k in _ENV}
    try:
        for k in _ENV:
            os.environ[k] = _NOWHERE
        import aiohttp.connector
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    ctx = getattr(aiohttp.connector, "_SSL_CONTEXT_VERIFIED", None)
    if isinstance(ctx, ssl.SSLContext):
        # not a daemon: the interpreter waits for it at exit (tens of ms at most). A daemon thread
        # still inside OpenSSL when a short command exits crashed the process (SIGSEGV) in
        # OpenSSL's own exit handlers
        _loader = threading.Thread(target=ctx.load_default_certs, name="aiohttp-default-cas", daemon=False)
        _loader.start()
    return True


def default_cas_loaded(timeout: float | None = None) -> bool:
    """Waits (at most ``timeout`` s) until aiohttp's verified context holds the default CAs."""
    if _loader is not None:
        _loader.join(timeout)
        return not _loader.is_alive()
    return True
