"""Rendered answers (boot scripts, GRUB configs, stubs) kept per node while their inputs are unchanged.

A render's cache key is ONE frozen value holding every input of the render besides the (fixed) config
(:class:`ScriptInputs`, :class:`StubInputs`), and the render function receives only that key, so an
input cannot reach a render without being part of its key. :class:`bootserver.service.BootService`
holds one :class:`RenderCache` per kind of answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from .streams import Release

K = TypeVar("K")
V = TypeVar("V")


class RenderCache(Generic[K, V]):
    """Rendered answers (scripts, stubs), one per node, reused while their inputs are unchanged.

    The key is ONE value holding every input of the render (a frozen dataclass such as
    :class:`ScriptInputs`), and the render function receives only that key: an input the key does not
    hold cannot reach the render, so it cannot be left out of the cache key by mistake.
    """

    def __init__(self, render: Callable[[K], V]) -> None:
        self._render = render
        self._entries: dict[str, tuple[K, V]] = {}

    def get(self, node: str, inputs: K) -> V:
        """The answer for ``inputs`` (rendered when the node's last answer had other inputs)."""
        hit = self._entries.get(node)
        if hit is not None and hit[0] == inputs:
            return hit[1]
        value = self._render(inputs)
        self._entries[node] = (inputs, value)
        return value


@dataclass(frozen=True)
class ScriptInputs:
    """Everything a node's boot script depends on besides the (fixed) config: the node, the release
    (:class:`~bootserver.streams.Release`), the signing state of the stub URL (its expiry is rounded
    up to the hour, and the key may rotate), the node's network kargs (a provider's device record
    may change: :func:`bootserver.network.node_kargs`) and the address family the machine asked over
    (``4``, ``6``, ``None``: not known), whose base URL its URLs start with."""

    node: str
    release: Release
    signing: tuple[int, bytes]
    network: tuple[str, ...]
    family: int | None = None


@dataclass(frozen=True)
class StubInputs:
    """Everything a node's stub depends on besides the config: the node, the spec version it is written
    in (negotiated per request), the real config's hash (``None``: no real config), the signing state
    of its URL, the CA (PEM) we embed, the signing state of its check-in URL (``None``: the
    profile says ``checkin: false``) and the address family the machine asked over (its URLs' base)."""

    node: str
    version: str
    config_hash: str | None
    signing: tuple[int, bytes]
    ca_pem: bytes | None
    checkin: tuple[int, bytes] | None = None
    family: int | None = None
