"""``provision``, ``deprovision`` and ``devices`` on top of any provider (:mod:`bootserver.providers`).

* :func:`provision`: group the nodes by provider, have each provider make its nodes boot from
  bootserver, record each node's device in the state store, then (``wait``) follow the node timeline
  until every node is ``up`` (its system checked in; profiles with ``checkin: false``: ``installed`` in
  install mode, ``running`` in live mode), a line per stage change.
  The provider's own status (Equinix's ``active``, a BMC's power state) says nothing about whether the
  install worked (docs/design.md, boot flow step 6); a provider that reports a failure (Equinix's
  ``failed``) still ends the wait with an error.
* :func:`deprovision`: have each provider undo it, and clear the node's device record.
* :func:`devices`: every provider's view of its devices, with bootserver's stage of each node.
* Device records: in the config's state store (:meth:`bootserver.state.StateStore.devices`; sqlite in
  ``state_dir``, or the ``state_store`` database shared by every replica), a JSON object per node: what
  the node's provider recorded (at least ``{"provider", "id", "state"}``; Equinix adds ``project``,
  ``hostname``, ``ip_addresses``..., Redfish ``address``, ``system``, ``macs``...). So ``provision``
  through one replica's config and ``devices``/``deprovision`` through another's see the same devices.

No aiohttp, no server imports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from bootserver.config import Config, ResolvedNode
from bootserver.config.providers import REGISTRY
from bootserver.errors import InputError
from bootserver.providers.base import Outcome, ProviderError, ProviderOptions
from bootserver.providers.interface import Provider, provider_class, provider_classes
from bootserver.state.backends import open_store
from bootserver.timeline import INSTALLED_STAGES, UP, final_stages
from bootserver.urls import Urls

log = logging.getLogger(__name__)

#: The timeline stage that ends ``provision --wait``, per profile mode, for a profile with ``checkin:
#: false`` (a profile that checks in, the default, waits for ``up``: :func:`done_stages`).
DONE_STAGES = {"install": "installed", "live": "running"}


def done_stages(node: ResolvedNode) -> tuple[str, ...]:
    """The stages that end the wait for a node (as resolved, :class:`bootserver.config.ResolvedNode`):
    :func:`bootserver.timeline.final_stages` (``up`` when its stub carries the check-in unit, the
    default; else ``installed``/``running`` or ``unconfirmed``)."""
    return final_stages(node.mode, checkin=node.checkin)


def _waiting_line(node: ResolvedNode, stage: str) -> str:
    if node.mode == "agent":
        return f"waiting for stage installing: the agent has its rootfs and installs the disk (now {stage})"
    if node.checkin:
        return f"waiting for stage {UP}: its system checks in once on the network (now {stage})"
    return f"waiting for stage {DONE_STAGES[node.mode]} (now {stage})"

Say = Callable[[str, str], None]


class ProvisionTimeout(ProviderError):
    """Nodes did not reach their final stage within the wait timeout (exit 1)."""


class DeviceFailed(ProviderError):
    """A provider reported a node's device failed (exit 1). ``lines`` is every node's last line."""

    def __init__(self, message: str, lines: Sequence[str]) -> None:
        super().__init__(message)
        self.lines = list(lines)


# ----------------------------------------------------------------------------------------- grouping


def unique(nodes: Sequence[ResolvedNode]) -> list[ResolvedNode]:
    """``nodes`` in order, each name once (its first)."""
    once: dict[str, ResolvedNode] = {}
    for node in nodes:
        once.setdefault(node.name, node)
    return list(once.values())


def by_provider(nodes: Sequence[ResolvedNode]) -> dict[str, list[ResolvedNode]]:
    """``{provider name: its nodes (as resolved), in the given order, each once}``. Raises ``InputError``
    (exit 2, before any call) naming the first node that has no provider (it names none and has no
    provider's settings)."""
    groups: dict[str, list[ResolvedNode]] = {}
    for node in unique(nodes):
        if node.provider is None:
            raise InputError(f"node {node.name}: no provider: set provider ({', '.join(REGISTRY)}) on the node or "
                             f"its profile {node.profile}")
        groups.setdefault(node.provider, []).append(node)
    return groups


# ----------------------------------------------------------------------------------------- the store


class BlockingStateStore:
    """A blocking face of the config's state store (not a store of its own; its name until issue 25 was
    ``StoreSession``): the store (:func:`bootserver.state.backends.open_store`: sqlite in ``state_dir``, or the
    ``state_store`` database), started on an event loop of its own for these synchronous commands: the
    signing keys (:meth:`keyring`), the node timeline's stages (:meth:`nodes`) and the device records
    (:meth:`devices`, :meth:`set_device`, :meth:`clear_device`). Close it (or use it as a context
    manager). Raises what :meth:`~bootserver.state.StateStore.start` raises; the other methods raise
    ``UnavailableError`` (exit 1) naming the store when it cannot answer."""

    def __init__(self, config: Config) -> None:
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

    def devices(self, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        """``{node: its device record, or {} without one}`` for each of ``names``, in order."""
        recorded = self._loop.run_until_complete(self.store.devices(list(names)))
        return {n: recorded.get(n) or {} for n in names}

    def all_devices(self) -> dict[str, dict[str, Any]]:
        """Every recorded device, by node."""
        return self._loop.run_until_complete(self.store.devices())

    def set_device(self, node: str, device: Mapping[str, Any]) -> None:
        """Record ``device`` as the node's device (at once: every replica sees it)."""
        self._loop.run_until_complete(self.store.set_device(node, device))

    def clear_device(self, node: str) -> None:
        """Remove the node's device record."""
        self._loop.run_until_complete(self.store.clear_device(node))

    def close(self) -> None:
        """Close the store and its event loop."""
        if not self._loop.is_closed():
            try:
                self._loop.run_until_complete(self.store.close())
            finally:
                self._loop.close()

    def __enter__(self) -> BlockingStateStore:
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


class Watched(NamedTuple):
    """A node :func:`wait_for_nodes` follows: the node as resolved, its open provider and the device
    record its provider made (``provision``'s)."""

    node: ResolvedNode
    provider: Provider[Any]
    device: dict[str, Any]


def wait_for_nodes(
    watched: Mapping[str, Watched],
    store: BlockingStateStore,
    *,
    since: float,
    policy: WaitPolicy = WaitPolicy(),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    say: Say = lambda node, message: None,
) -> dict[str, dict[str, Any]]:
    """Follow the node timeline (in ``store``) until each node of ``watched`` (name -> the node, its
    provider and its recorded device: :class:`Watched`) entered a final stage (:func:`done_stages`: ``up``
    when its profile checks in, else :data:`DONE_STAGES` or ``unconfirmed``) at or after ``since`` (unix
    seconds).

    Each round reads every pending node's stage (``say(node, "stage <stage>")`` when it changed) and
    asks its provider for the device (``say(node, "device <id> is <state>")`` when that changed; the
    new record is stored). Once a node's stage is ``installing`` or later (its network boot is over),
    its provider's :meth:`~bootserver.providers.interface.Provider.booted` runs, once (Redfish ejects the
    boot image there, so the installed system's reboots never boot it). A node whose install-mode
    profile boots once and that is already ``installing``/``installed`` when the wait starts is done at
    once (its network boot boots the local disk until ``bootserver nodes reinstall``). A provider poll
    that fails without an answer (network) is retried next round. ``clock`` (monotonic seconds) and
    ``sleep`` are injectable.

    Returns ``{node: last device record}``. Raises :class:`DeviceFailed` when a provider reports a
    failed device, :class:`ProvisionTimeout` when ``policy.timeout`` seconds pass first,
    ``ProviderError`` when the far end answers with an error.
    """
    devices = {name: w.device for name, w in watched.items()}
    provider_state = {node: device.get("state") for node, device in devices.items()}
    deadline = clock() + policy.timeout
    interval = policy.interval
    pending = list(watched)
    stages = {s.node: s for s in store.nodes(pending) if s.node in watched}
    last_stage = {}
    booted: set[str] = set()

    def network_boot_over(node: str) -> None:
        # once per node: the provider undoes what only the network boot needed (Redfish: the image)
        if node not in booted:
            booted.add(node)
            changed = watched[node].provider.booted(watched[node].node, devices[node], say)
            if changed is not None:
                devices[node] = changed
                store.set_device(node, changed)

    for node in list(pending):
        stage = stages[node].stage
        last_stage[node] = stage
        if watched[node].node.boots_once and stage in INSTALLED_STAGES:
            say(node, f"already {stage}; it boots its disk until `bootserver nodes reinstall {node}`")
            network_boot_over(node)
            pending.remove(node)
        else:
            say(node, _waiting_line(watched[node].node, stage))
    while pending:
        failed = []
        states = {s.node: s for s in store.nodes(pending)}
        for node in list(pending):
            try:
                poll = watched[node].provider.poll(watched[node].node, devices[node])
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
                    store.set_device(node, devices[node])
                if poll.failed:
                    failed.append(node)
                    continue
            state = states[node]
            if state.stage != last_stage[node]:
                last_stage[node] = state.stage
                say(node, f"stage {state.stage}")
            if state.stage in INSTALLED_STAGES and (state.stage_at or 0) >= since:
                network_boot_over(node)
            if state.stage in done_stages(watched[node].node) and (state.stage_at or 0) >= since:
                pending.remove(node)
        if failed:
            lines = [w.provider.line(w.node, devices[n]) for n, w in watched.items()]
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
    config: Config,
    options: Mapping[str, ProviderOptions],
    nodes: Sequence[ResolvedNode],
    *,
    wait: bool = True,
    policy: WaitPolicy = WaitPolicy(),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.time,
    say: Say = lambda node, message: None,
) -> list[str]:
    """Provision ``nodes`` (resolved by the caller from ``config``'s inventory:
    :class:`bootserver.config.ResolvedNode`; a name given twice counts once) with their providers
    (``options``: provider name -> its options, built once by the CLI; a provider not in it gets its
    defaults), then (``wait``) follow their
    installs (:func:`wait_for_nodes`). Returns one output line per node, in order.

    Raises ``InputError`` (exit 2) for bad settings before any call, ``ProviderError`` (exit 1) for
    a failure of a provider, :class:`DeviceFailed` / :class:`ProvisionTimeout` from the wait.
    """
    since = now()
    watched: dict[str, Watched] = {}
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(BlockingStateStore(config))
        urls = Urls(config, keys=store.keyring)
        opened = [(stack.enter_context(_open(name, config, options, urls)), group)
                  for name, group in by_provider(nodes).items()]
        for provider, group in opened:
            given = {node.name: node for node in group}
            outcomes = provider.provision(group, store.devices(list(given)), store.set_device, say)
            for outcome in outcomes:
                assert outcome.device is not None
                watched[outcome.node] = Watched(given[outcome.node], provider, outcome.device)
        if wait:
            devices = wait_for_nodes(watched, store, since=since, policy=policy, clock=clock, sleep=sleep, say=say)
        else:
            devices = {name: w.device for name, w in watched.items()}
        return [watched[n.name].provider.line(n, devices[n.name]) for n in unique(nodes)]


def deprovision(config: Config, options: Mapping[str, ProviderOptions], nodes: Sequence[ResolvedNode], *,
                say: Say = lambda n, m: None) -> list[str]:
    """Undo ``provision`` for ``nodes`` (resolved, as for :func:`provision`) with their providers
    (``options`` as for :func:`provision`) and clear their recorded devices. Returns one output line per
    node. A node whose provider fails keeps its recorded device."""
    lines: dict[str, str] = {}
    with BlockingStateStore(config) as store:
        urls = Urls(config, keys=store.keyring)
        for name, group in by_provider(nodes).items():
            with _open(name, config, options, urls) as provider:
                for outcome in provider.deprovision(group, store.devices([n.name for n in group]), say):
                    store.clear_device(outcome.node)
                    lines[outcome.node] = outcome.line
    return [lines[n.name] for n in unique(nodes)]


def devices(config: Config, options: Mapping[str, ProviderOptions]) -> list[str]:
    """The lines of ``bootserver devices``: each provider in use (nodes of its own, or options naming
    it; none: no line) lists its devices with bootserver's stage of each node, given the device
    records of the state store (whichever replica's config recorded them). ``options`` as for
    :func:`provision`."""
    names = [cls.name for cls in provider_classes() if cls.used_by(config, _options_of(cls, options))]
    lines: list[str] = []
    with BlockingStateStore(config) as store:
        stages = {s.node: s.stage for s in store.nodes(list(config.nodes))}
        recorded = store.all_devices()
        urls = Urls(config, keys=store.keyring)
        for name in names:
            with _open(name, config, options, urls) as provider:
                lines += provider.devices(stages, recorded)
    return lines


def _options_of(cls: type[Provider[Any]], options: Mapping[str, ProviderOptions]) -> Any:
    """The provider's options from ``options``, else its defaults."""
    return options.get(cls.name) or cls.options_type()


def _open(name: str, config: Config, options: Mapping[str, ProviderOptions], urls: Urls) -> Provider[Any]:
    """The provider ``name`` opened with its options."""
    cls = provider_class(name)
    return cls.open(config, _options_of(cls, options), urls)


__all__ = [
    "DONE_STAGES",
    "BlockingStateStore",
    "DeviceFailed",
    "Outcome",
    "ProvisionTimeout",
    "WaitPolicy",
    "Watched",
    "by_provider",
    "deprovision",
    "devices",
    "done_stages",
    "provision",
    "unique",
    "wait_for_nodes",
]
