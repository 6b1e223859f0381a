"""Keys and certificates of a local control plane: a certificate authority, serving certificates it issues, and the
ServiceAccount token signing key pair.

RSA keys in PKCS#1 ("RSA PRIVATE KEY"): open-policy-agent/cert-controller, which Kueue's internal certificate
management runs, parses the CA key of its Secret with ``x509.ParsePKCS1PrivateKey`` and gives up on any other form
(open-policy-agent/cert-controller@v0.16.0 pkg/rotator/rotator.go ``buildArtifactsFromSecret``); every Go and Python
TLS stack here reads PKCS#1 too. ``cryptography`` is imported where used: only a control plane needs it.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEY_BITS = 2048


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert: Path, key: Path) -> tuple[Path, Path]:
        cert.parent.mkdir(parents=True, exist_ok=True)
        cert.write_bytes(self.cert_pem)
        key.write_bytes(self.key_pem)
        key.chmod(0o600)
        return cert, key


def _rsa_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                   serialization.NoEncryption()))


def _alt_names(dns_names: Sequence[str], ips: Sequence[str]) -> Any:
    from cryptography import x509

    return x509.SubjectAlternativeName(
        [x509.DNSName(n) for n in dns_names] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    )


def _name(common_name: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: str, public_key: Any, days: int) -> Any:
    from cryptography import x509

    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


@dataclass(frozen=True)
class Authority:
    """A self-signed certificate authority; :meth:`Authority.issue` signs serving certificates with it."""

    name: str
    pair: KeyPair

    @classmethod
    def create(cls, name: str, *, dns_names: Sequence[str] = (), ips: Sequence[str] = (), days: int = 365) -> Authority:
        """A new CA named ``name``. ``dns_names`` and ``ips`` go into its subject alternative names: a self-signed CA
        that also serves (the API server test's) names its host there, and cert-controller accepts a CA only when it
        verifies for the CA name the controller expects (``validCACert``: Kueue's ``kueue-ca``), 90 days ahead
        (``defaultLookaheadInterval``), hence a year of validity."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization

        key = _rsa_key()
        builder = _builder(name, key.public_key(), days).issuer_name(_name(name)).add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True
        ).add_extension(
            x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True,
                          data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        if dns_names or ips:
            builder = builder.add_extension(_alt_names(dns_names, ips), critical=False)
        cert = builder.sign(key, hashes.SHA256())
        return cls(name, KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)))

    def issue(self, name: str, *, dns_names: Sequence[str] = (), ips: Sequence[str] = (), days: int = 365) -> KeyPair:
        """A serving certificate (TLS server authentication) for ``dns_names`` and ``ips``, signed by this CA."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID

        ca_cert = x509.load_pem_x509_certificate(self.pair.cert_pem)
        ca_key = serialization.load_pem_private_key(self.pair.key_pem, password=None)
        key = _rsa_key()
        cert = (
            _builder(name, key.public_key(), days)
            .issuer_name(ca_cert.subject)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(_alt_names(dns_names, ips), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def service_account_keys() -> KeyPair:
    """The ServiceAccount token signing key (``key_pem``) and its public key (``cert_pem`` holds the PEM public key,
    what kube-apiserver's ``--service-account-key-file`` reads)."""
    from cryptography.hazmat.primitives import serialization

    key = _rsa_key()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return KeyPair(bytes(public), _key_pem(key))
