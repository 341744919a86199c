"""cluster/certs.py: the webhook CA and serving certificate (the Secret round trip runs against
the real API server in tests/e2e/test_webhooks.py)."""

from __future__ import annotations

import datetime as dt
import ssl

from cryptography import x509

from policy_scheduler.cluster.certs import Bundle, make_serving, new_bundle, serving_problem

HOSTS = ["policy-scheduler-webhook.policy-scheduler-system.svc", "127.0.0.1"]


def test_a_new_bundle_serves_its_hosts_and_verifies_against_its_ca(tmp_path):
    b = new_bundle(HOSTS)
    assert serving_problem(b, HOSTS) is None
    cert = x509.load_pem_x509_certificate(b.cert)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [HOSTS[0]]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    # what the API server does with the caBundle: verify the serving chain
    (tmp_path / "c").write_bytes(b.cert)
    (tmp_path / "k").write_bytes(b.key)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "c", tmp_path / "k")
    client = ssl.create_default_context(cadata=b.ca_cert.decode())
    assert client.verify_mode == ssl.CERT_REQUIRED


def test_the_secret_round_trip_and_what_forces_a_new_serving_certificate():
    b = new_bundle(HOSTS)
    again = Bundle.from_secret({"data": b.secret_data()})
    assert again == b
    assert Bundle.from_secret({"data": {"tls.crt": "x"}}) is None
    assert serving_problem(b, [*HOSTS, "other.example"]) == "does not cover other.example"
    soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=340)
    assert serving_problem(b, HOSTS, now=soon).startswith("expires ")
    renewed = Bundle(b.ca_cert, b.ca_key, *make_serving(b.ca_cert, b.ca_key, HOSTS))
    assert serving_problem(renewed, HOSTS) is None  # same CA: the caBundle stays valid
    foreign = new_bundle(HOSTS)
    assert serving_problem(Bundle(b.ca_cert, b.ca_key, foreign.cert, foreign.key), HOSTS) == \
        "not signed by the Secret's CA"
    cert_manager = {"data": {k: v for k, v in b.secret_data().items() if k != "ca.key"}}
    assert Bundle.from_secret(cert_manager).ca_key is None


def test_a_key_that_does_not_match_its_certificate_and_a_ca_near_expiry_are_found():
    from policy_scheduler.cluster.certs import ca_problem, expiries

    b = new_bundle(HOSTS)
    other = new_bundle(HOSTS)
    assert serving_problem(Bundle(b.ca_cert, b.ca_key, b.cert, other.key), HOSTS) == "tls.key does not match tls.crt"
    assert serving_problem(Bundle(b.ca_cert, b.ca_key, b.cert, b"junk"), HOSTS).startswith("tls.key unreadable")
    assert ca_problem(b) is None
    late = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=3650 - 20)
    assert ca_problem(b, now=late).startswith("CA expires ")
    assert ca_problem(Bundle(b"junk", None, b.cert, b.key)).startswith("CA unreadable")
    ex = expiries(b)
    assert ex["ca"] - ex["serving"] > dt.timedelta(days=3000)


def test_a_ca_near_expiry_is_replaced_with_a_new_serving_pair():
    """ensure_bundle against a Secret whose CA expires within 30 days: a new CA and serving pair
    are written (the caBundle then changes); a mismatched key gets a new pair from the same CA."""
    import asyncio

    from support.fakeclient import FakeClient

    from policy_scheduler.cluster import certs

    path = "/api/v1/namespaces/ns/secrets"
    old_ca, old_key = certs.make_ca(now=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3650 - 10))
    b = Bundle(old_ca, old_key, *make_serving(old_ca, old_key, HOSTS))
    client = FakeClient()
    client.serve(path, {"metadata": {"name": "tls", "namespace": "ns"}, "data": b.secret_data()})
    got = asyncio.run(certs.ensure_bundle(client, "ns", "tls", HOSTS))
    assert got.ca_cert != old_ca and certs.ca_problem(got) is None and serving_problem(got, HOSTS) is None
    assert Bundle.from_secret(client.served[path]["tls"]) == got
    mismatched = Bundle(got.ca_cert, got.ca_key, got.cert, new_bundle(HOSTS).key)
    client.served[path]["tls"]["data"] = mismatched.secret_data()
    fixed = asyncio.run(certs.ensure_bundle(client, "ns", "tls", HOSTS))
    assert fixed.ca_cert == got.ca_cert and serving_problem(fixed, HOSTS) is None
