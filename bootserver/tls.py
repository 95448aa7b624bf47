"""``bootserver tls init``: a private CA and a server certificate for bootserver's HTTPS listener.

Certificates are X.509 v3 (RFC 5280) made with the ``cryptography`` package, PEM encoded (RFC 7468):

* ``ca.crt`` / ``ca.key``: a self-signed CA (ECDSA P-256, ``basicConstraints CA:TRUE pathlen:0``,
  ``keyUsage keyCertSign, cRLSign``), valid :data:`CA_DAYS` days;
* ``server.crt`` / ``server.key``: signed by that CA (``CA:FALSE``, ``digitalSignature``,
  ``extendedKeyUsage serverAuth``), valid :data:`SERVER_DAYS` days, with subjectAltNames: DNS names for
  host names, IP addresses for IPs (RFC 5280 4.2.1.6).

All four files go into ``<state_dir>/tls/`` (mode 0700); keys are mode 0600. Each file is written
atomically (temp file, fsync, rename), and nothing is written when any file already exists unless
``force`` is given.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .errors import InputError
from .files import LinkRefused, open_dir, write_atomic

#: Validity of the CA certificate, in days (10 years).
CA_DAYS = 3650
#: Validity of the server certificate, in days (825, the CA/Browser Forum's former maximum).
SERVER_DAYS = 825
FILES = ("ca.crt", "ca.key", "server.crt", "server.key")


class TLSExistsError(InputError):
    """``tls init`` would overwrite existing files (exit 2); rerun with ``--force``."""


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name.strip("[]")))
    except ValueError:
        return x509.DNSName(name)


def san_names(base_urls: Iterable[str | None], extra: Iterable[str]) -> list[str]:
    """Host names of ``base_urls`` plus ``extra`` names, de-duplicated, in order."""
    names: list[str] = []
    for url in base_urls:
        host = urlsplit(url).hostname if url else None
        if host and host not in names:
            names.append(host)
    for n in extra:
        if n and n not in names:
            names.append(n)
    return names


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def init_tls(directory: Path, names: list[str], *, force: bool = False,
             now: datetime.datetime | None = None) -> dict[str, Path]:
    """Create the CA and server certificate for ``names`` (DNS names or IP addresses) in ``directory``.

    Returns ``{file name: path}``. Raises :class:`TLSExistsError` if a file exists and not ``force``,
    ``ValueError`` for no names, :class:`~bootserver.errors.InputError` when a link stands in ``state_dir``
    where a file or the folder belongs, and ``OSError`` when the folder cannot be written.
    """
    if not names:
        raise ValueError("no names for the server certificate")
    paths = {f: directory / f for f in FILES}
    existing = [str(p) for p in paths.values() if p.exists()]
    if existing and not force:
        raise TLSExistsError(f"{existing[0]}: already exists; use --force to replace the CA and certificate")
    now = now or datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bootserver CA"),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "bootserver")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                                       key_cert_sign=True, crl_sign=True, encipher_only=False,
                                       decipher_only=False), critical=True)
          .add_extension(ca_ski, critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
            .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False, crl_sign=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    # below state_dir, never through a link (files.LinkRefused): a private key written elsewhere is lost
    root = directory.parent
    try:
        fd = open_dir(root, directory.name, create=True, mode=0o700)
        try:
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
        write_atomic(paths["ca.key"], _key_pem(ca_key), mode=0o600, root=root)
        write_atomic(paths["server.key"], _key_pem(key), mode=0o600, root=root)
        write_atomic(paths["ca.crt"], ca.public_bytes(pem), mode=0o644, root=root)
        write_atomic(paths["server.crt"], cert.public_bytes(pem), mode=0o644, root=root)
    except LinkRefused as e:
        raise InputError(f"{e.filename}: is a link; refused: bootserver writes its TLS files in a real folder "
                         "of state_dir only") from None
    return paths
