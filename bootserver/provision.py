"""``provision``, ``deprovision`` and ``devices`` on top of any provider (:mod:`bootserver.providers`).

* :func:`provision`: group the nodes by provider, have each provider make its nodes boot from
  bootserver, record each node's device in its state file, then (``wait``) follow the node timeline
  until every node is ``up`` (its system checked in; profiles with ``checkin: false``: ``installed`` in
  install mode, ``running`` in live mode), a line per stage change.
  The provider's own status (Equinix's ``active``, a BMC's power state) says nothing about whether the
  install worked (docs/design.md, boot flow step 6); a provider that reports a failure (Equinix's
  ``failed``) still ends the wait with an error.
* :func:`deprovision`: have each provider undo it, and clear the node's device.
* :func:`devices`: every provider's view of its devices, with bootserver's stage of each node.
* Node state: ``<state_dir>/nodes/<node>.json``, a JSON object whose ``device`` member is what the
  node's provider recorded (at least ``{"provider", "id", "state"}``; Equinix adds ``project``,
  ``hostname``, ``ip_addresses``..., Redfish ``address``, ``system``, ``macs``...); written atomically
  and owner-only (:func:`bootserver.files.write_atomic`). Other members of the file are kept as they are, so
  other parts of bootserver may share it.

No aiohttp, no server imports.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bootserver.errors import BootserverError, InputError
from bootserver.files import write_atomic
from bootserver.providers.base import (
    DEFAULT_PROVIDER,
    Outcome,
    Provider,
    ProviderError,
    provider_class,
    provider_classes,
    provider_of,
)
from bootserver.state.backends import open_store
from bootserver.timeline import INSTALLED_STAGES, UP, final_stages
from bootserver.urls import Urls

log = logging.getLogger(__name__)

#: The timeline stage that ends ``provision --wait``, per profile mode, for a profile with ``checkin:
#: false`` (a profile that checks in, the default, waits for ``up``: :func:`done_stages`).
DONE_STAGES = {"install": "installed", "live": "running"}


def done_stages(profile: Any) -> tuple[str, ...]:
    """The stages that end the wait for a node of ``profile`` (a :class:`bootserver.config.Profile`):
    :func:`bootserver.timeline.final_stages` (``up`` when its stub carries the check-in unit, the
    default; else ``installed``/``running`` or ``unconfirmed``)."""
    return final_stages(profile.mode, checkin=profile.checkin)


def _waiting_line(profile: Any, stage: str) -> str:
    if profile.checkin:
        return f"waiting for stage {UP}: its system checks in once on the network (now {stage})"
    return f"waiting for stage {DONE_STAGES[profile.mode]} (now {stage})"

Say = Callable[[str, str], None]


class ProvisionTimeout(ProviderError):
    """Nodes did not reach their final stage within the wait timeout (exit 1)."""


class DeviceFailed(ProviderError):
    """A provider reported a node's device failed (exit 1). ``lines`` is every node's last line."""

    def __init__(self, message: str, lines: Sequence[str]) -> None:
        super().__init__(message)
        self.lines = list(lines)


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


def record_device(state_dir: str | os.PathLike[str], node: str, device: dict[str, Any]) -> None:
    """Store ``device`` (a provider's record) as the node's device in its state file, keeping the
    file's other members. Raises ``BootserverError`` (exit 1) naming the file when it cannot be written."""
    data = read_node_state(state_dir, node)
    data["node"] = node
    data["device"] = device
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


def recorded_devices(state_dir: str | os.PathLike[str], nodes: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``{node: its recorded device member, or {}}``."""
    return {n: read_node_state(state_dir, n).get("device") or {} for n in nodes}


# ----------------------------------------------------------------------------------------- grouping


def by_provider(config: Any, nodes: Sequence[str]) -> dict[str, list[str]]:
    """``{provider name: its nodes, in the given order}``; a node that names no provider goes to
    :data:`~bootserver.providers.base.DEFAULT_PROVIDER` (``equinix``, as before providers existed)."""
    groups: dict[str, list[str]] = {}
    for node in dict.fromkeys(nodes):
        groups.setdefault(provider_of(config, node) or DEFAULT_PROVIDER, []).append(node)
    return groups


# ----------------------------------------------------------------------------------------- the store


class StoreSession:
    """The config's state store (:func:`bootserver.state.backends.open_store`: sqlite in ``state_dir``, or the
    ``state_store`` database), started on an event loop of its own for these synchronous commands: the
    signing keys (:meth:`keyring`) and the node timeline's stages (:meth:`nodes`). Close it (or use it
    as a context manager). Raises what :meth:`~bootserver.state.StateStore.start` raises."""

    def __init__(self, config: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self.store = open_store(config)
        try:
            self._loop.run_until_complete(self.store.start())
        except BaseException:
            self.close()
            raise

    def keyring(self) -> Any:
        """The store's signing keys (a :class:`~bootserver.signing.Keyring`, kept fresh)."""
        return self.store.keyring()

    def nodes(self, names: Sequence[str]) -> list[Any]:
        """The timeline's :class:`~bootserver.timeline.NodeState` of every node in ``names`` (and others)."""
        return self._loop.run_until_complete(self.store.nodes(list(names)))

    def close(self) -> None:
        """Close the store and its event loop."""
        if not self._loop.is_closed():
            try:
                self._loop.run_until_complete(self.store.close())
            finally:
                self._loop.close()

    def __enter__(self) -> StoreSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ----------------------------------------------------------------------------------------- waiting


@dataclass(frozen=True)
class WaitPolicy:
    """How long and how often to poll: give up after ``timeout`` seconds; first pause ``interval``
    seconds, each next pause ``factor`` times longer, at most ``max_interval`` seconds."""

    timeout: float = 1800.0
    interval: float = 5.0
    max_interval: float = 60.0
    factor: float = 1.5


def wait_for_nodes(
    config: Any,
    watched: dict[str, tuple[Provider, dict[str, Any]]],
    store: StoreSession,
    *,
    since: float,
    policy: WaitPolicy = WaitPolicy(),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    say: Say = lambda node, message: None,
) -> dict[str, dict[str, Any]]:
    """Follow the node timeline (in ``store``) until each node of ``watched`` (node -> its provider and recorded
    device) entered a final stage (:func:`done_stages`: ``up`` when its profile checks in, else
    :data:`DONE_STAGES` or ``unconfirmed``) at or after ``since`` (unix seconds).

    Each round reads every pending node's stage (``say(node, "stage <stage>")`` when it changed) and
    asks its provider for the device (``say(node, "device <id> is <state>")`` when that changed; the
    new record is stored). A node whose install-mode profile boots once and that is already
    ``installing``/``installed`` when the wait starts is done at once (its network boot boots the
    local disk until ``bootserver nodes reinstall``). A provider poll that fails without an answer
    (network) is retried next round. ``clock`` (monotonic seconds) and ``sleep`` are injectable.

    Returns ``{node: last device record}``. Raises :class:`DeviceFailed` when a provider reports a
    failed device, :class:`ProvisionTimeout` when ``policy.timeout`` seconds pass first,
    ``ProviderError`` when the far end answers with an error.
    """
    devices = {node: device for node, (_, device) in watched.items()}
    provider_state = {node: device.get("state") for node, device in devices.items()}
    deadline = clock() + policy.timeout
    interval = policy.interval
    pending = list(watched)
    stages = {s.node: s for s in store.nodes(pending) if s.node in watched}
    last_stage = {}
    for node in list(pending):
        profile = config.node_profile(node)
        stage = stages[node].stage
        last_stage[node] = stage
        if profile.boots_once and stage in INSTALLED_STAGES:
            say(node, f"already {stage}; it boots its disk until `bootserver nodes reinstall {node}`")
            pending.remove(node)
        else:
            say(node, _waiting_line(profile, stage))
    while pending:
        failed = []
        states = {s.node: s for s in store.nodes(pending)}
        for node in list(pending):
            provider, _ = watched[node]
            try:
                poll = provider.poll(node, devices[node])
            except ProviderError as exc:
                if exc.status is not None:
                    raise
                log.warning("node %s: polling its device: %s", node, exc)
                poll = None
            if poll is not None:
                if poll.device is not None:
                    devices[node] = poll.device
                if poll.state != provider_state[node]:
                    provider_state[node] = poll.state
                    say(node, f"device {devices[node].get('id')} is {poll.state}")
                    record_device(config.state_dir, node, devices[node])
                if poll.failed:
                    failed.append(node)
                    continue
            state = states[node]
            if state.stage != last_stage[node]:
                last_stage[node] = state.stage
                say(node, f"stage {state.stage}")
            if state.stage in done_stages(config.node_profile(node)) and (state.stage_at or 0) >= since:
                pending.remove(node)
        if failed:
            lines = [watched[n][0].line(n, devices[n]) for n in watched]
            names = ", ".join(f"{n} ({devices[n].get('id')})" for n in failed)
            raise DeviceFailed(f"device provisioning failed: {names}; run `bootserver deprovision` "
                               "and try again", lines)
        if not pending:
            break
        remaining = deadline - clock()
        if remaining <= 0:
            where = ", ".join(f"{n} at stage {last_stage[n]}" for n in pending)
            raise ProvisionTimeout(f"gave up waiting after {policy.timeout:g} s: {where}")
        sleep(min(interval, remaining))
        interval = min(interval * policy.factor, policy.max_interval)
    return devices


# ------------------------------------------------------------------------------------------ commands


def provision(
    config: Any,
    args: argparse.Namespace,
    nodes: Sequence[str],
    *,
    wait: bool = True,
    policy: WaitPolicy = WaitPolicy(),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.time,
    say: Say = lambda node, message: None,
) -> list[str]:
    """Provision ``nodes`` with their providers (options in ``args``), then (``wait``) follow their
    installs (:func:`wait_for_nodes`). Returns one output line per node, in order.

    Raises ``InputError`` (exit 2) for bad settings before any call, ``ProviderError`` (exit 1) for
    a failure of a provider, :class:`DeviceFailed` / :class:`ProvisionTimeout` from the wait.
    """
    since = now()
    watched: dict[str, tuple[Provider, dict[str, Any]]] = {}
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(StoreSession(config))
        urls = Urls(config, keys=store.keyring)
        opened = [(stack.enter_context(provider_class(name).open(config, args, urls)), group)
                  for name, group in by_provider(config, nodes).items()]
        for provider, group in opened:
            recorded = recorded_devices(config.state_dir, group)
            outcomes = provider.provision(
                group, recorded, lambda node, device: record_device(config.state_dir, node, device), say)
            for outcome in outcomes:
                assert outcome.device is not None
                watched[outcome.node] = (provider, outcome.device)
        if wait:
            devices = wait_for_nodes(config, watched, store, since=since, policy=policy, clock=clock,
                                     sleep=sleep, say=say)
        else:
            devices = {node: device for node, (_, device) in watched.items()}
        return [watched[n][0].line(n, devices[n]) for n in dict.fromkeys(nodes)]


def deprovision(config: Any, args: argparse.Namespace, nodes: Sequence[str], *, say: Say = lambda n, m: None
                ) -> list[str]:
    """Undo ``provision`` for ``nodes`` with their providers and clear their recorded devices.
    Returns one output line per node. A node whose provider fails keeps its recorded device."""
    lines: dict[str, str] = {}
    for name, group in by_provider(config, nodes).items():
        with provider_class(name).open(config, args, None) as provider:
            for outcome in provider.deprovision(group, recorded_devices(config.state_dir, group), say):
                clear_device(config.state_dir, outcome.node)
                lines[outcome.node] = outcome.line
    return [lines[n] for n in dict.fromkeys(nodes)]


def devices(config: Any, args: argparse.Namespace) -> list[str]:
    """The lines of ``bootserver devices``: each provider in use (nodes of its own, or options naming
    it; Equinix when none is) lists its devices with bootserver's stage of each node."""
    with StoreSession(config) as store:
        stages = {s.node: s.stage for s in store.nodes(list(config.nodes))}
    classes = [cls for cls in provider_classes() if cls.used_by(config, args)] or [provider_class(DEFAULT_PROVIDER)]
    lines: list[str] = []
    for cls in classes:
        with cls.open(config, args, None) as provider:
            lines += provider.devices(stages)
    return lines


__all__ = [
    "DONE_STAGES",
    "DeviceFailed",
    "Outcome",
    "ProvisionTimeout",
    "StoreSession",
    "WaitPolicy",
    "by_provider",
    "clear_device",
    "deprovision",
    "devices",
    "done_stages",
    "node_state_path",
    "provision",
    "read_node_state",
    "record_device",
    "recorded_devices",
    "wait_for_nodes",
    "write_json_atomic",
]
