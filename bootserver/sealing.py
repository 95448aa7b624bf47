"""Sealed secrets: a BMC password given to the fleet API (``redfish.password``, ``ipmi.password``; docs/api.md,
"Secrets") is kept in the state store only sealed, as the node's ``redfish.password_sealed`` /
``ipmi.password_sealed``: AES-256-GCM (NIST SP 800-38D, through ``cryptography``'s ``AESGCM``) under the key
in ``state_dir/secrets.key`` (32 random bytes, mode 0600, made on the first seal, never followed through a
link), with the node's name and the mapping as associated data, so a sealed value pasted into another node
or mapping does not open. The text is ``v1:<key id>:<base64url of nonce + ciphertext>``; the key id (the
first 8 hex digits of the key's SHA-256) lets a replica without the writer's key say which key it lacks.

Every replica that provisions a node with a sealed password needs the same ``secrets.key``: copy it from
the replica that made it (docs/api.md). The opened password goes to the BMC client only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import InputError
from .files import LinkRefused, open_file, read_file

#: The key's file in ``state_dir``.
KEY_FILE = "secrets.key"
KEY_BYTES = 32
NONCE_BYTES = 12
VERSION = "v1"


class SealError(InputError):
    """A sealed secret that cannot be opened here (no or another key, or altered): names the node, the
    key path and the key ids, never a secret (exit 2)."""


def _key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


def _read_key(state_dir: Path) -> bytes | None:
    try:
        key = read_file(state_dir, KEY_FILE)
    except FileNotFoundError:
        return None
    except (LinkRefused, OSError) as e:
        raise SealError(f"{state_dir / KEY_FILE}: cannot read the secrets key: "
                        f"{getattr(e, 'strerror', None) or e}") from None
    if len(key) != KEY_BYTES:
        raise SealError(f"{state_dir / KEY_FILE}: not a secrets key ({len(key)} bytes, want {KEY_BYTES})")
    return key


def _key(state_dir: Path, create: bool) -> bytes | None:
    key = _read_key(state_dir)
    if key is not None or not create:
        return key
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = open_file(state_dir, KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # made meanwhile by another process
        return _read_key(state_dir)
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(KEY_BYTES))
        f.flush()
        os.fsync(f.fileno())
    return _read_key(state_dir)


def _aad(node: str, where: str) -> bytes:
    return f"bootserver {node} {where}".encode()


def seal(state_dir: Path, node: str, where: str, secret: str) -> str:
    """``secret`` sealed for node ``node``'s mapping ``where`` (``redfish``, ``ipmi``) under
    ``state_dir``'s key (made when missing). Raises :class:`SealError` for an unreadable key file."""
    key = _key(state_dir, create=True)
    assert key is not None
    nonce = secrets.token_bytes(NONCE_BYTES)
    sealed = AESGCM(key).encrypt(nonce, secret.encode(), _aad(node, where))
    return f"{VERSION}:{_key_id(key)}:{base64.urlsafe_b64encode(nonce + sealed).decode().rstrip('=')}"


def unseal(state_dir: Path, node: str, where: str, text: str) -> str:
    """The secret that :func:`seal` sealed as ``text`` for node ``node``'s ``where``. Raises
    :class:`SealError` naming ``nodes.<node>.<where>.password_sealed`` when it cannot be opened here."""
    at = f"nodes.{node}.{where}.password_sealed"
    version, _, rest = text.partition(":")
    kid, _, body = rest.partition(":")
    if version != VERSION or not kid or not body:
        raise SealError(f"{at}: not a sealed secret of this bootserver")
    key = _key(state_dir, create=False)
    if key is None:
        raise SealError(f"{at}: sealed with key {kid}, and {state_dir / KEY_FILE} is missing: copy it from "
                        "the server that sealed it")
    if _key_id(key) != kid:
        raise SealError(f"{at}: sealed with key {kid}, and {state_dir / KEY_FILE} is key {_key_id(key)}: copy "
                        "the key from the server that sealed it")
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        return AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _aad(node, where)).decode()
    except (binascii.Error, ValueError, InvalidTag):
        raise SealError(f"{at}: does not open with key {kid} (altered, or sealed for another node)") from None
