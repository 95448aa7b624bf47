"""Provisioning orchestration on top of a ``bootserver.metal.Provider``.

* ``provision_nodes``: for each node, reuse the device of the project that has the node's hostname and
  bootserver's tag, or create one; record it in the node's state file; wait (bounded poll with
  backoff, injectable clock and sleep) until every device is ``active`` or ``failed``.
* ``deprovision_nodes``: delete each node's device and clear the device from its state file.
* Node state: ``<state_dir>/nodes/<node>.json``, a JSON object whose ``device`` member holds
  ``{"provider", "project", "id", "hostname", "state", "ip_addresses": [{"address", "address_family",
  "cidr", "gateway", "public"}], "network_ports": [{"type", "name", "data": {"mac"}, "bond": {"name"},
  "network_type"}], "updated_at"}`` (addresses and ports in the Equinix Metal OpenAPI spec's names,
  ``IPAssignment`` and ``Port``); written atomically (temp file, fsync, rename, fsync of the folder).
  Other members of the file are kept as they are, so other parts of bootserver may share it (the
  server can bind a node to its device's source addresses from ``device.ip_addresses``).

No aiohttp, no server imports.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bootserver.errors import BootserverError, InputError
from bootserver.files import write_atomic
from bootserver.metal import (
    GONE_STATES,
    TERMINAL_STATES,
    Device,
    DeviceSpec,
    MetalError,
    MetalNotFound,
    Provider,
)

log = logging.getLogger(__name__)


class ProvisionTimeout(MetalError):
    """Devices did not reach ``active`` or ``failed`` within the wait timeout (exit 1)."""


class DeviceFailed(MetalError):
    """At least one device ended ``failed`` (exit 1). ``results`` holds every node's outcome."""

    def __init__(self, message: str, results: Sequence[NodeResult]) -> None:
        super().__init__(message)
        self.results = list(results)


# ------------------------------------------------------------------------------------------ state


def node_state_path(state_dir: str | os.PathLike[str], node: str) -> Path:
    """``<state_dir>/nodes/<node>.json``. Raises ``InputError`` for a node name that is not a plain
    file name (empty, ``.``/``..``, a path separator or a NUL)."""
    if not node or node in (".", "..") or "/" in node or "\\" in node or "\0" in node:
        raise InputError(f"node name cannot name a state file: {node!r}")
    return Path(state_dir) / "nodes" / f"{node}.json"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (:func:`bootserver.files.write_atomic`, owner-only
    permissions). Creates the folder. Raises ``OSError`` on disk failures."""
    write_atomic(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode(), mode=0o600)


def read_node_state(state_dir: str | os.PathLike[str], node: str) -> dict[str, Any]:
    """Return the node's state object (``{}`` when there is no state file).

    Raises ``InputError`` when the file is not a JSON object, ``BootserverError`` (exit 1) when it
    cannot be read; both name the file.
    """
    path = node_state_path(state_dir, node)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise BootserverError(f"{path}: cannot read node state: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object")
    return data


def device_state(provider: str, project: str, device: Device) -> dict[str, Any]:
    """The ``device`` member of a node's state for ``device``."""
    return {
        "provider": provider,
        "project": project,
        "id": device.id,
        "hostname": device.hostname,
        "state": device.state,
        "ip_addresses": [a.to_json() for a in device.ip_addresses],
        "network_ports": [p.to_json() for p in device.network_ports],
        "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def record_device(state_dir: str | os.PathLike[str], node: str, provider: str, project: str, device: Device) -> None:
    """Store ``device`` as the node's device in its state file, keeping the file's other members.

    Raises ``BootserverError`` (exit 1) naming the file when it cannot be written."""
    data = read_node_state(state_dir, node)
    data["node"] = node
    data["device"] = device_state(provider, project, device)
    path = node_state_path(state_dir, node)
    try:
        write_json_atomic(path, data)
    except OSError as exc:
        raise BootserverError(f"{path}: cannot write node state: {exc.strerror or exc}") from None


def clear_device(state_dir: str | os.PathLike[str], node: str) -> None:
    """Remove the node's ``device`` member; remove the file when nothing else is left in it."""
    path = node_state_path(state_dir, node)
    data = read_node_state(state_dir, node)
    if not data:
        return
    data.pop("device", None)
    try:
        if set(data) <= {"node"}:
            path.unlink(missing_ok=True)
        else:
            write_json_atomic(path, data)
    except OSError as exc:
        raise BootserverError(f"{path}: cannot write node state: {exc.strerror or exc}") from None


# ----------------------------------------------------------------------------------------- waiting


@dataclass(frozen=True)
class WaitPolicy:
    """How long and how often to poll: give up after ``timeout`` seconds; first pause ``interval``
    seconds, each next pause ``factor`` times longer, at most ``max_interval`` seconds."""

    timeout: float = 1800.0
    interval: float = 5.0
    max_interval: float = 60.0
    factor: float = 1.5


def wait_for_devices(
    provider: Provider,
    device_ids: Sequence[str],
    *,
    policy: WaitPolicy = WaitPolicy(),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_change: Callable[[Device], None] | None = None,
) -> dict[str, Device]:
    """Poll ``provider.get`` for every device until each is ``active`` or ``failed``.

    Returns ``{device_id: Device}`` in the terminal state. ``clock`` (seconds, monotonic) and
    ``sleep`` (seconds) are injectable; ``on_change`` is called with a device whenever its state
    differs from the previous poll (and at the first poll). A poll that fails without an HTTP answer
    (network error) is retried at the next round until the deadline. Raises ``ProvisionTimeout``
    when ``policy.timeout`` seconds pass first, ``MetalError`` when a device disappears (404) or the
    API answers with an error.
    """
    deadline = clock() + policy.timeout
    interval = policy.interval
    pending = list(dict.fromkeys(device_ids))
    last: dict[str, Device] = {}
    done: dict[str, Device] = {}
    while True:
        for device_id in list(pending):
            try:
                device = provider.get(device_id)
            except MetalNotFound:
                raise MetalError(f"device {device_id} disappeared while waiting for it") from None
            except MetalError as exc:
                if exc.status is not None:
                    raise
                log.warning("polling device %s: %s", device_id, exc)
                continue
            previous = last.get(device_id)
            last[device_id] = device
            if on_change is not None and (previous is None or previous.state != device.state):
                on_change(device)
            if device.state in TERMINAL_STATES:
                done[device_id] = device
                pending.remove(device_id)
        if not pending:
            return done
        remaining = deadline - clock()
        if remaining <= 0:
            states = ", ".join(
                f"{i} ({last[i].hostname}) {last[i].state}" if i in last else f"{i} (never answered)"
                for i in pending
            )
            raise ProvisionTimeout(f"gave up waiting after {policy.timeout:g} s: still not active: {states}")
        sleep(min(interval, remaining))
        interval = min(interval * policy.factor, policy.max_interval)


# ------------------------------------------------------------------------------------ provisioning


@dataclass(frozen=True)
class NodeRequest:
    """One node to provision: its name, the project (UUID) and the device to create."""

    node: str
    project: str
    spec: DeviceSpec


@dataclass(frozen=True)
class NodeResult:
    """Outcome for one node: its device (last known), and whether this run created it."""

    node: str
    device: Device
    created: bool


def find_managed_device(devices: Iterable[Device], hostname: str, tag: str) -> Device | None:
    """Return the device among ``devices`` named ``hostname`` and tagged ``tag`` (ignoring devices
    being deleted), or ``None``. Raises ``MetalError`` when more than one matches, naming their ids."""
    matches = [d for d in devices if d.hostname == hostname and tag in d.tags and d.state not in GONE_STATES]
    if len(matches) > 1:
        ids = ", ".join(d.id for d in matches)
        raise MetalError(f"{len(matches)} devices named {hostname!r} with tag {tag!r}: {ids}; delete the extras")
    return matches[0] if matches else None


def provision_nodes(
    provider: Provider,
    requests: Sequence[NodeRequest],
    state_dir: str | os.PathLike[str],
    *,
    tag: str,
    wait: bool = True,
    policy: WaitPolicy = WaitPolicy(),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_event: Callable[[str, str], None] | None = None,
) -> list[NodeResult]:
    """Create (or reuse) one device per node, record it, and wait for all of them.

    Idempotent: a device of the project with the node's hostname and ``tag`` is reused, not
    duplicated (one ``list`` call per project). Every request's ``spec.tags`` must contain ``tag``.
    The device is recorded in ``state_dir`` right after creation and again after the wait.
    ``on_event(node, message)`` reports progress (``created device ...``, ``reusing device ...``,
    state changes). With ``wait=False`` the devices are returned as first seen.

    Raises ``MetalError`` on API failures, ``ProvisionTimeout`` when the wait runs out (devices
    recorded as last seen), ``DeviceFailed`` after recording when any device ended ``failed``.
    """
    say = on_event or (lambda node, message: None)
    existing: dict[str, list[Device]] = {}
    results: dict[str, NodeResult] = {}
    by_device: dict[str, NodeRequest] = {}
    for req in requests:
        if tag not in req.spec.tags:
            raise ValueError(f"DeviceSpec of node {req.node} lacks the managed tag {tag!r}")
        if req.project not in existing:
            existing[req.project] = provider.list(req.project, tag=tag)
        device = find_managed_device(existing[req.project], req.spec.hostname, tag)
        created = device is None
        if device is None:
            device = provider.create(req.project, req.spec)
            existing[req.project].append(device)
            say(req.node, f"created device {device.id} ({device.state})")
        else:
            say(req.node, f"reusing device {device.id} ({device.state})")
        record_device(state_dir, req.node, provider.name, req.project, device)
        results[req.node] = NodeResult(req.node, device, created)
        by_device[device.id] = req

    if wait:
        def changed(device: Device) -> None:
            req = by_device[device.id]
            say(req.node, f"device {device.id} is {device.state}")
            record_device(state_dir, req.node, provider.name, req.project, device)

        final = wait_for_devices(
            provider,
            [r.device.id for r in results.values()],
            policy=policy,
            clock=clock,
            sleep=sleep,
            on_change=changed,
        )
        for node, result in list(results.items()):
            device = final[result.device.id]
            results[node] = NodeResult(node, device, result.created)
            req = by_device[device.id]
            record_device(state_dir, node, provider.name, req.project, device)
    out = [results[r.node] for r in requests]
    failed = [r for r in out if r.device.state == "failed"]
    if wait and failed:
        names = ", ".join(f"{r.node} ({r.device.id})" for r in failed)
        raise DeviceFailed(
            f"device provisioning failed: {names}; run `bootserver deprovision` and try again", out
        )
    return out


@dataclass(frozen=True)
class DeprovisionResult:
    """Outcome for one node: the device id deleted (``None`` when there was none) and whether the
    API still had it (``False``: it was already gone)."""

    node: str
    device_id: str | None
    deleted: bool


def deprovision_nodes(
    provider: Provider,
    nodes: Sequence[tuple[str, str, str | None]],
    state_dir: str | os.PathLike[str],
    *,
    tag: str,
    on_event: Callable[[str, str], None] | None = None,
) -> list[DeprovisionResult]:
    """Delete the device of each ``(node, hostname, project)`` and clear it from the node's state.

    The device is the project's device with that hostname and ``tag``; when none is listed, the
    device id recorded in the node's state. ``project`` ``None`` means the one recorded in the
    state (``InputError`` if there is none). A device the API no longer knows (404) counts as gone.
    Raises ``MetalError`` on API failures (state left untouched for that node).
    """
    say = on_event or (lambda node, message: None)
    listed: dict[str, list[Device]] = {}
    out = []
    for node, hostname, project in nodes:
        recorded = read_node_state(state_dir, node).get("device") or {}
        project = project or recorded.get("project")
        if not project:
            raise InputError(f"node {node}: no project: pass --project or set metal.project")
        if project not in listed:
            listed[project] = provider.list(project, tag=tag)
        device = find_managed_device(listed[project], hostname, tag)
        device_id = device.id if device else recorded.get("id")
        deleted = False
        if device_id:
            try:
                provider.delete(device_id)
                deleted = True
                say(node, f"deleted device {device_id}")
            except MetalNotFound:
                say(node, f"device {device_id} was already gone")
        else:
            say(node, "no device")
        clear_device(state_dir, node)
        out.append(DeprovisionResult(node, device_id, deleted))
    return out


def format_device(device: Device, node: str | None = None) -> str:
    """One line per device: ``[node ]id state addr,addr,...`` (``-`` when it has no address yet)."""
    addresses = ",".join(a.address for a in device.ip_addresses) or "-"
    head = f"{node} " if node else ""
    return f"{head}{device.id} {device.state} {addresses}"

