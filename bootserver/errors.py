"""Errors with the exit codes of the user contract.

Every error a user can cause or meet is one of these; the CLI prints ``str(err)`` as one line on
stderr and exits with ``err.exit_code``: 2 for bad usage or bad input (config, stream metadata), 1 for
runtime failures (network, integrity, disk).
"""

from __future__ import annotations

from urllib.parse import quote


class BootserverError(Exception):
    """Base of every error bootserver reports to a user. ``exit_code`` is the CLI exit status.

    ``str(err)`` is for the person running bootserver (the CLI's line, the server's log) and may name
    local paths and sizes. ``public`` is what an HTTP answer may say instead: words a device operator
    can act on, never a local path, size or key (``None``: the server says only what failed, by the
    error's class; see :func:`bootserver.http.app.error_answer`).
    """

    exit_code: int = 1
    public: str | None = None

    def __init__(self, *args: object, public: str | None = None) -> None:
        super().__init__(*args)
        if public is not None:
            self.public = public


class InputError(BootserverError):
    """Bad input: a config file, a stream metadata document or a command-line value (exit 2)."""

    exit_code = 2


class LocatedError(InputError):
    """Bad input at a known place: ``<source>: <path>: <message>`` (the path is left out when empty)."""

    def __init__(self, source: str, path: str, message: str) -> None:
        self.source = source
        self.path = path
        self.message = message
        super().__init__(f"{source}: {path}: {message}" if path else f"{source}: {message}")


class ConfigError(LocatedError):
    """A config file is wrong. ``path`` is the key path: ``bootserver.yaml: nodes.m0.profile: ...``."""

    @property
    def keypath(self) -> str:
        """The dotted key path at fault (``""`` for the whole file)."""
        return self.path


class MetadataError(LocatedError):
    """A CoreOS stream metadata document is wrong. ``path`` is the JSON path: ``rhcos.json: architectures...``."""

    @property
    def jsonpath(self) -> str:
        """The dotted JSON path at fault (``""`` for the whole document)."""
        return self.path


class UnknownNodeError(InputError):
    """No node matches a name or selector (HTTP 404 in the server, exit 2 on the command line)."""


class NodeCheckError(ConfigError):
    """A node written to the state store (or read from it) fails the checks ``check-config`` makes of a
    file node: ``<source>: nodes.<node>.<key>: <message>`` (exit 2; the fleet API's 422). ``node`` is the
    node's name; ``errors`` every problem found as ``(key path, message)`` pairs, the key path relative to
    the config (``nodes.web-1.mac[0]``), from pydantic's structured errors (``loc``) where the schema
    refused it; the first is the one in the message."""

    def __init__(self, source: str, path: str, message: str, *, node: str,
                 errors: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(source, path, message)
        self.node = node
        self.errors = errors or ((path, message),)


class NodeConflictError(InputError):
    """A store node would take what another node holds (exit 2; the fleet API's 409): ``key`` is
    ``name``, ``mac``, ``uuid``, ``hostname`` or ``address``, ``value`` the value at stake, ``holder`` the
    node that holds it and ``holder_source`` where that one comes from (``"store"`` or ``"file:PATH"``,
    :attr:`bootserver.config.Config.node_sources`). A name or MAC raced for by two writers: the loser
    gets this, naming the winner."""

    def __init__(self, node: str, key: str, value: str, holder: str, holder_source: str) -> None:
        self.node = node
        self.key = key
        self.value = value
        self.holder = holder
        self.holder_source = holder_source
        where = "the state store" if holder_source == "store" else holder_source.removeprefix("file:")
        if key == "name":
            super().__init__(f"nodes.{node}: node {node} is already a node of {where}")
            return
        label = {"mac": "MAC", "uuid": "SMBIOS UUID"}.get(key, key)
        path = "network" if key == "address" else key
        super().__init__(f"nodes.{node}.{path}: {label} {value} is already the {label} of node {holder} ({where})")


class FileNodeError(InputError):
    """A store node's name is a file node's: ``node`` is defined in ``source`` (``"file:PATH"``), which
    alone may change it (exit 2; the fleet API's 409). ``stored``: the state store holds a node of that
    name already (a start or reload whose files now name it: the message names both origins), else a
    store write names the file node."""

    def __init__(self, node: str, source: str, *, stored: bool = False) -> None:
        self.node = node
        self.source = source
        path = source.removeprefix("file:")
        if stored:
            super().__init__(f"nodes.{node}: node {node} is defined in {path} and in the state store; a name may "
                             f"be defined once (remove it from the file, or `bootserver nodes delete {node}`)")
        else:
            super().__init__(f"nodes.{node}: node {node} is defined in {path}; change it there, not in the "
                             "state store")


class PreconditionFailedError(InputError):
    """A store write's precondition does not hold (exit 2; the fleet API's 412): ``node``'s generation
    is ``actual`` (``None``: no such store node), and the write expected ``expected`` (``None``:
    ``create_only``, no such node)."""

    def __init__(self, node: str, expected: int | None, actual: int | None) -> None:
        self.node = node
        self.expected = expected
        self.actual = actual
        want = "no such node (create only)" if expected is None else f"generation {expected}"
        have = "it does not exist" if actual is None else f"it is at generation {actual}"
        super().__init__(f"nodes.{node}: precondition failed: expected {want}, {have}")


class UnknownStoreNodeError(UnknownNodeError):
    """No store node of that name (exit 2; the fleet API's 404): ``node``."""

    def __init__(self, node: str) -> None:
        self.node = node
        super().__init__(f"nodes.{node}: no node {node} in the state store", public=f"no node {shown(node)}")


class ChangesExpiredError(InputError):
    """The changes since revision ``since`` are no longer kept (the change log keeps the newest ones;
    ``oldest`` is the oldest revision still listed): list the nodes again (the fleet API's 410)."""

    def __init__(self, since: int, oldest: int) -> None:
        self.since = since
        self.oldest = oldest
        super().__init__(f"the state store's node changes since revision {since} are no longer kept "
                         f"(it keeps from revision {oldest}); list the nodes again")


class FetchError(BootserverError):
    """A download failed: network error, HTTP error status, or a short body (exit 1)."""


class IntegrityError(FetchError):
    """Downloaded bytes do not match the sha256 from stream metadata (exit 1)."""

    def __init__(self, url: str, expected: str, actual: str) -> None:
        self.url = url
        self.expected = expected
        self.actual = actual
        changed = " (the file changed since its release was written: not served; import it again)" \
            if url.startswith("file://") else ""
        super().__init__(f"{url}: sha256 mismatch: expected {expected}, got {actual}{changed}")


class DiskFullError(BootserverError):
    """The cache's disk has no room for an artifact (exit 1). Names the cache path and the bytes needed."""

    def __init__(self, path: object, needed: int, free: int) -> None:
        self.path = path
        self.needed = needed
        self.free = free
        super().__init__(f"{path}: not enough disk space to cache it: {needed} more bytes needed, {free} free")


class UnavailableError(BootserverError):
    """Something a request needs is not available yet (stream metadata not loaded, the state store or
    the signing keys unreachable): HTTP 503 with ``Retry-After: <retry_after>`` (seconds), which iPXE
    and Ignition retry, where a 4xx would end the boot."""

    #: Seconds a client is asked to wait before it retries (the ``Retry-After`` header).
    retry_after: int = 5


class DeviceRecordError(UnavailableError):
    """A node's device record cannot give its network now (no record, an old record, a network type
    we do not configure; ``network: provider``): 503 to the device, exit 1 from ``render``. The message
    says what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message, public=message)  # written for the operator, with no local path


def shown(value: str, limit: int = 64) -> str:
    """A value taken from a request, as a public HTTP body may name it: its first ``limit`` characters
    percent-encoded (RFC 3986 §2.1) but for letters, digits and ``:-._~`` (so no newline, NUL, quote,
    markup or script syntax gets through), ``...`` after a cut."""
    return quote(value[:limit], safe=":-._~") + ("..." if len(value) > limit else "")
