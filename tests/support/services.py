"""A :class:`~bootserver.service.BootService` over a :class:`~bootserver.runtime.Runtime` of its own, as a
command makes one (the server makes one runtime and a service per loaded config)."""

from __future__ import annotations

from bootserver.config import Config
from bootserver.runtime import Runtime
from bootserver.service import BootService
from bootserver.signing import Signer
from bootserver.state import StateStore


def service(config: Config, signer: Signer | None = None, *, state: StateStore | None = None) -> BootService:
    """A service for ``config`` over a new runtime (``signer``, ``state``: as :class:`Runtime` takes them).
    Start and close it through ``svc.runtime``."""
    return BootService(config, Runtime(config, signer, state=state))
