"""The flood of tests/e2e/test_webhook_flood.py, run as its own process (so that its threads do
not share the test's interpreter lock): ``python webhook_flood.py PORT SECONDS CLIENTS``.

Each client thread POSTs, over TLS to 127.0.0.1 only, one 4-8 MB body again and again, as fast as
the webhook answers, until SECONDS have passed: even clients send a document of unclosed
brackets, odd ones millions of tiny objects (``[{},{},...]``), to the three webhook paths in turn.
Prints one JSON line: requests answered by HTTP status, connection errors, bytes sent."""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import threading
import time
from collections import Counter

PATHS = ("/validate/pods", "/mutate/pods", "/validate/schedulingpolicies")


def body(i: int) -> bytes:
    size = (4 + (i % 5)) * 1_000_000  # 4..8 MB (within the webhook's 8 MiB: each one is read)
    head = b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"flood-%d",' % i
    if i % 2 == 0:  # unclosed brackets
        return head + b'"object":' + b"[" * (size - len(head) - 9)
    n = (size - len(head) - 40) // 3
    return head + b'"object":{"metadata":{"name":"x"},"spec":[' + b"{}," * n + b"{}]}}}"


def client(i: int, port: int, until: float, stats: Counter, lock: threading.Lock) -> None:
    data = body(i)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    k = i
    while time.monotonic() < until:
        path = PATHS[k % len(PATHS)]
        k += 1
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ctx)
        try:
            conn.request("POST", path, data, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            key = f"http_{resp.status}"
            sent = len(data)
        except (OSError, http.client.HTTPException) as e:
            key, sent = f"error_{type(e).__name__}", 0
            time.sleep(0.01)  # a refused connection: do not spin
        finally:
            conn.close()
        with lock:
            stats[key] += 1
            stats["bytes_sent"] += sent


def main() -> None:
    port, seconds, clients = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    until = time.monotonic() + seconds
    stats: Counter = Counter()
    lock = threading.Lock()
    threads = [threading.Thread(target=client, args=(i, port, until, stats, lock), daemon=True)
               for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 15)
    print(json.dumps(dict(stats)), flush=True)


if __name__ == "__main__":
    main()
