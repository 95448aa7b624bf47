"""Errors with the exit codes of the user contract.

Every error a user can cause or meet is one of these; the CLI prints ``str(err)`` as one line on
stderr and exits with ``err.exit_code``: 2 for bad usage or bad input (config, stream metadata), 1 for
runtime failures (network, integrity, disk).
"""

from __future__ import annotations


class BootserverError(Exception):
    """Base of every error bootserver reports to a user. ``exit_code`` is the CLI exit status."""

    exit_code: int = 1


class InputError(BootserverError):
    """Bad input: a config file, a stream metadata document or a command-line value (exit 2)."""

    exit_code = 2


class ConfigError(InputError):
    """A config file is wrong. The message reads ``<file>: <key.path>: <what is wrong>``."""

    def __init__(self, source: str, keypath: str, message: str) -> None:
        self.source = source
        self.keypath = keypath
        self.message = message
        where = f"{source}: {keypath}: " if keypath else f"{source}: "
        super().__init__(where + message)


class MetadataError(InputError):
    """A CoreOS stream metadata document is wrong. Message: ``<file or URL>: <json.path>: <problem>``."""

    def __init__(self, source: str, jsonpath: str, message: str) -> None:
        self.source = source
        self.jsonpath = jsonpath
        self.message = message
        where = f"{source}: {jsonpath}: " if jsonpath else f"{source}: "
        super().__init__(where + message)


class UnknownNodeError(InputError):
    """No node matches a name or selector (HTTP 404 in the server, exit 2 on the command line)."""


class FetchError(BootserverError):
    """A download failed: network error, HTTP error status, or a short body (exit 1)."""


class IntegrityError(FetchError):
    """Downloaded bytes do not match the sha256 from stream metadata (exit 1)."""

    def __init__(self, url: str, expected: str, actual: str) -> None:
        self.url = url
        self.expected = expected
        self.actual = actual
        super().__init__(f"{url}: sha256 mismatch: expected {expected}, got {actual}")


class DiskFullError(BootserverError):
    """The cache's disk has no room for an artifact (exit 1). Names the cache path and the bytes needed."""

    def __init__(self, path: object, needed: int, free: int) -> None:
        self.path = path
        self.needed = needed
        self.free = free
        super().__init__(f"{path}: not enough disk space to cache it: {needed} more bytes needed, {free} free")


class UnavailableError(BootserverError):
    """Something a request needs is not available yet (stream metadata not loaded): HTTP 503."""
