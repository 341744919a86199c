"""The admission webhooks' certificates, made by the operator itself (no cert-manager needed).

A CA (10 years) and a serving certificate signed by it (1 year, for the webhook Service's DNS
names and any extra hosts) are kept in one Secret, so every replica serves the same certificate
and one caBundle fits them all. At start-up each replica reads the Secret; the first creates it
(a replica that loses the create race reads the winner's). A serving certificate that no longer
covers the names, or expires within 30 days, is re-issued by the same CA (the caBundle does not
change); a serving key that does not match its certificate is re-issued too. A CA that expires
within 30 days (or cannot be read) is replaced with a new serving pair, and the new caBundle
written. The CA's bundle is then written into the webhook configurations.

With cert-manager instead: give the Secret to cert-manager (a Certificate with ``secretName``
the same Secret, and the CA injector's annotation on the webhook configurations) and run with
``--webhook-manage-certs=false``: the operator then only reads the Secret.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import logging
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .kubeclient import ApiError

log = logging.getLogger("policy_scheduler.webhooks")

CA_DAYS = 3650
SERVING_DAYS = 365
RENEW_BEFORE = dt.timedelta(days=30)


@dataclass
class Bundle:
    """PEM bytes of the CA and of the serving pair."""

    ca_cert: bytes
    ca_key: bytes | None  # absent when another issuer (cert-manager) fills the Secret
    cert: bytes
    key: bytes

    def secret_data(self) -> dict[str, str]:
        enc = lambda b: base64.b64encode(b).decode()  # noqa: E731
        data = {"ca.crt": enc(self.ca_cert), "tls.crt": enc(self.cert), "tls.key": enc(self.key)}
        if self.ca_key is not None:
            data["ca.key"] = enc(self.ca_key)
        return data

    @classmethod
    def from_secret(cls, secret: dict) -> "Bundle | None":
        data = secret.get("data") or {}
        try:
            dec = {k: base64.b64decode(data[k]) for k in ("ca.crt", "tls.crt", "tls.key")}
            ca_key = base64.b64decode(data["ca.key"]) if data.get("ca.key") else None
        except (KeyError, ValueError):
            return None
        return cls(dec["ca.crt"], ca_key, dec["tls.crt"], dec["tls.key"])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(hosts: list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return x509.SubjectAlternativeName(names)


def make_ca(now: dt.datetime | None = None) -> tuple[bytes, bytes]:
    now = now or dt.datetime.now(dt.timezone.utc)
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "policy-scheduler webhook CA")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def make_serving(ca_cert: bytes, ca_key: bytes, hosts: list[str], now: dt.datetime | None = None) -> tuple[bytes, bytes]:
    now = now or dt.datetime.now(dt.timezone.utc)
    ca = x509.load_pem_x509_certificate(ca_cert)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    key = _key()
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=SERVING_DAYS))
            .add_extension(_san(hosts), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(signer, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def new_bundle(hosts: list[str]) -> Bundle:
    ca_cert, ca_key = make_ca()
    return Bundle(ca_cert, ca_key, *make_serving(ca_cert, ca_key, hosts))


def serving_problem(b: Bundle, hosts: list[str], now: dt.datetime | None = None) -> str | None:
    """Why the bundle's serving certificate must be re-issued, or None."""
    now = now or dt.datetime.now(dt.timezone.utc)
    try:
        cert = x509.load_pem_x509_certificate(b.cert)
        ca = x509.load_pem_x509_certificate(b.ca_cert)
    except ValueError as e:
        return f"unreadable: {e}"
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "not signed by the Secret's CA"
    try:
        key = serialization.load_pem_private_key(b.key, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        return f"tls.key unreadable: {e}"
    if key.public_key() != cert.public_key():
        return "tls.key does not match tls.crt"
    if cert.not_valid_after_utc - now < RENEW_BEFORE:
        return f"expires {cert.not_valid_after_utc:%Y-%m-%d}"
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "no subject alternative names"
    have = {str(x) for x in san.get_values_for_type(x509.DNSName)} | {
        str(x) for x in san.get_values_for_type(x509.IPAddress)}
    missing = [h for h in hosts if _norm(h) not in have]
    return f"does not cover {', '.join(missing)}" if missing else None


def ca_problem(b: Bundle, now: dt.datetime | None = None) -> str | None:
    """Why the bundle's CA must be replaced (a new CA, a new serving pair and a new caBundle), or
    None: it expires within RENEW_BEFORE, or cannot be read. Without this, a serving certificate
    re-issued under an expired CA would make every webhook call fail (and, failing open, admit)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    try:
        ca = x509.load_pem_x509_certificate(b.ca_cert)
    except ValueError as e:
        return f"CA unreadable: {e}"
    if ca.not_valid_after_utc - now < RENEW_BEFORE:
        return f"CA expires {ca.not_valid_after_utc:%Y-%m-%d}"
    return None


def expiries(b: Bundle) -> dict[str, dt.datetime]:
    """When the serving certificate and the CA expire (the ``policy_scheduler_webhook_certificate_
    expiry_seconds`` gauge); an unreadable one is left out."""
    out = {}
    for which, pem in (("serving", b.cert), ("ca", b.ca_cert)):
        try:
            out[which] = x509.load_pem_x509_certificate(pem).not_valid_after_utc
        except ValueError:
            pass
    return out


def _norm(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


async def ensure_bundle(client, namespace: str, name: str, hosts: list[str], manage: bool = True) -> Bundle:
    """The Secret's bundle, created or renewed as needed (``manage``); raises ApiError."""
    path = f"/api/v1/namespaces/{namespace}/secrets"
    for _ in range(5):  # optimistic writes: another replica may write between our read and write
        try:
            secret = await client.request("GET", f"{path}/{name}")
        except ApiError as e:
            if e.status != 404 or not manage:
                raise
            bundle = new_bundle(hosts)
            body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                    "metadata": {"name": name, "namespace": namespace,
                                 "labels": {"app.kubernetes.io/name": "policy-scheduler"}},
                    "data": bundle.secret_data()}
            try:
                await client.request("POST", path, body)
            except ApiError as e2:
                if e2.status == 409:
                    continue  # another replica made it first: use theirs
                raise
            log.info("webhook certificates created in Secret %s/%s (CA valid %d days)", namespace, name, CA_DAYS)
            return bundle
        bundle = Bundle.from_secret(secret)
        if not manage:
            if bundle is None:
                raise ValueError(f"Secret {namespace}/{name} lacks ca.crt, tls.crt or tls.key")
            return bundle
        why = ("incomplete" if bundle is None or bundle.ca_key is None
               else ca_problem(bundle) or serving_problem(bundle, hosts))
        if why is None:
            return bundle
        if bundle is None or bundle.ca_key is None or why.startswith("CA "):
            bundle = new_bundle(hosts)  # a new CA: the caBundle changes (written next)
        else:  # same CA, new serving pair: the caBundle stays valid
            bundle = Bundle(bundle.ca_cert, bundle.ca_key, *make_serving(bundle.ca_cert, bundle.ca_key, hosts))
        secret["data"] = bundle.secret_data()
        try:
            await client.request("PUT", f"{path}/{name}", secret)
        except ApiError as e:
            if e.status == 409:
                continue
            raise
        log.info("webhook serving certificate in Secret %s/%s re-issued: it was %s", namespace, name, why)
        return bundle
    raise RuntimeError(f"Secret {namespace}/{name}: too many concurrent writers")
