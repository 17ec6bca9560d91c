"""Throwaway certificates: a CA and the certificates it signs (``kraftlog dev up``, tests).

Owns :class:`CertificateAuthority` (an EC P-256 key and a self-signed CA certificate) and
:meth:`CertificateAuthority.issue`: a leaf certificate for one node or user, with the
common name its principal is made from (``broker-101``, ``controller-1``, ``admin``), the
DNS names and IP addresses a client verifies as subject alternative names, and both
serverAuth and clientAuth usage, since every node is a server and a client of the others.
Everything is PEM bytes; writing files is the caller's.

For local clusters and tests only: a production CA is the operator's (cert-manager, a
corporate PKI). Callers: :mod:`kraftlog.dev`, tests. Edge module: the ``cryptography``
library and the wall clock (validity starts now).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_VALIDITY_DAYS = 30
ORGANIZATION = "kraftlog"


@dataclass(frozen=True, slots=True, kw_only=True)
class Issued:
    """A private key (PKCS#8 PEM, unencrypted) and its certificate (PEM)."""

    key_pem: bytes
    certificate_pem: bytes

    def keystore_pem(self) -> bytes:
        """KIP-651's PEM keystore file: the key, then the chain."""
        return self.key_pem + self.certificate_pem


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    """A self-signed CA that issues node and user certificates."""

    def __init__(self, *, common_name: str = "kraftlog dev CA",
                 validity_days: int = DEFAULT_VALIDITY_DAYS,
                 now: datetime.datetime | None = None) -> None:
        self._now = now or datetime.datetime.now(datetime.UTC)
        self._validity = datetime.timedelta(days=validity_days)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = _name(common_name)
        self._certificate = (
            x509.CertificateBuilder()
            .subject_name(self._name).issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now - datetime.timedelta(minutes=5))
            .not_valid_after(self._now + self._validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256()))

    @property
    def certificate_pem(self) -> bytes:
        return self._certificate.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str, *, dns_names: Sequence[str] = ("localhost",),
              ip_addresses: Sequence[str] = ("127.0.0.1",)) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now - datetime.timedelta(minutes=5))
            .not_valid_after(self._now + self._validity)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        return Issued(key_pem=_key_pem(key),
                      certificate_pem=certificate.public_bytes(serialization.Encoding.PEM))
