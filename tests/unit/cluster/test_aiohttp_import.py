"""cluster/aiohttp_import.py: aiohttp is imported without its import-time TLS contexts reading the
system's CAs (start-up time), and its verified context gets the same CAs on a thread, from the
variables as the user set them. Each case in a fresh interpreter (the import state is what is
tested)."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path


CODE = """
import os, ssl, sys
before = {k: os.environ.get(k) for k in ('SSL_CERT_FILE', 'SSL_CERT_DIR')}
import policy_scheduler.cluster  # the package's __init__ imports aiohttp
from policy_scheduler.cluster import aiohttp_import
import aiohttp.connector as c
print(aiohttp_import.default_cas_loaded(30))
print({k: os.environ.get(k) for k in before} == before)
print(c._SSL_CONTEXT_VERIFIED.cert_store_stats()['x509_ca'], ssl.create_default_context().cert_store_stats()['x509_ca'])
print(c._SSL_CONTEXT_UNVERIFIED.verify_mode == ssl.CERT_NONE)
"""


def run(code: str, env: dict[str, str] | None = None) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_the_verified_context_gets_the_system_cas_after_the_import():
    loaded, env_kept, got, want, unverified = run(CODE)
    assert (loaded, env_kept, unverified) == ("True", "True", "True")
    assert int(want) > 0 and got == want


def test_a_bundle_the_user_names_is_the_one_loaded(tmp_path: Path):
    from policy_scheduler.cluster.certs import make_ca

    bundle = tmp_path / "cas.pem"
    pems = [make_ca()[0] for _ in range(3)]
    bundle.write_bytes(b"".join(pems))
    loaded, env_kept, got, want, _ = run(CODE, {"SSL_CERT_FILE": str(bundle), "SSL_CERT_DIR": str(tmp_path)})
    assert (loaded, env_kept) == ("True", "True")
    assert got == want == "3"


def test_nothing_is_done_when_aiohttp_was_imported_first():
    got = run("""
import aiohttp.connector as c
n = c._SSL_CONTEXT_VERIFIED.cert_store_stats()['x509_ca']
from policy_scheduler.cluster import aiohttp_import
print(aiohttp_import.import_aiohttp(), aiohttp_import.default_cas_loaded(0), n > 0)
""")
    assert got == ["False", "True", "True"]


def test_the_import_no_longer_reads_the_cas():
    """The point of it: aiohttp's import-time contexts start empty (the CAs come on the thread)."""
    got = run("""
import os
os.environ['SSL_CERT_FILE'] = os.environ['SSL_CERT_DIR'] = '/nonexistent'  # so the thread finds none either
import policy_scheduler.cluster
import aiohttp.connector as c
print(c._SSL_CONTEXT_VERIFIED.cert_store_stats()['x509_ca'], c._SSL_CONTEXT_UNVERIFIED.cert_store_stats()['x509_ca'])
""")
    assert got == ["0", "0"]
    assert ssl.create_default_context().cert_store_stats()["x509_ca"] > 0  # not for want of CAs here


def test_a_command_that_exits_at_once_waits_for_the_ca_thread_and_exits_cleanly():
    """A short command (explain, whatif) imports the package and may exit while the CAs are still
    loading: the thread is no daemon, so the interpreter waits for it instead of exiting under it
    (a daemon thread inside OpenSSL at exit crashed the process with SIGSEGV, about one exit in 20
    on a busy 2-core machine)."""
    code = ("import policy_scheduler.cluster\nfrom policy_scheduler.cluster import aiohttp_import\n"
            "t = aiohttp_import._loader\nprint(t is not None and not t.daemon)\n")
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
            for _ in range(12)]
    assert [(o.returncode, o.stdout.strip()) for o in outs] == [(0, "True")] * 12, [o.stderr for o in outs]
