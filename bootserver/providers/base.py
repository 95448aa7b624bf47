"""The providers' errors, options and results, and the one HTTP retry policy: what every provider module
and the API clients share. The provider interface is :mod:`bootserver.providers.interface`; the registry
of providers (module, settings key, platform) and which provider a node has are the config's
(:mod:`bootserver.config.providers`), which checks the providers at load.

A *provider* is what ``bootserver provision``, ``deprovision`` and ``devices`` drive to make a machine
boot from bootserver: Equinix Metal's API (``equinix``: create a ``custom_ipxe`` device that chains to
the node's signed URL) or a BMC over Redfish (``redfish``) or IPMI (``ipmi``): boot from the network
once, power on (the two BMC providers share one flow, :mod:`bootserver.providers.bmc`). Each
provider is one module of this package with one ``Provider`` subclass that owns

* its settings: the key it reads in ``profiles.<p>`` / ``nodes.<n>`` (``Provider.settings_key``),
  a pydantic model in ``config/<name>_settings.py`` that :mod:`bootserver.config` composes and checks
  at config load (with a top-level mapping where the provider has one: ``metal:``);
* its command-line options, declared as the fields of a frozen dataclass (``Provider.options_type``,
  each field made by :func:`option`): the CLI adds them to its parser and builds one typed options
  object per provider from the command line, which ``Provider.open`` takes (providers never
  see the argparse namespace);
* its client and its requests (``Provider.open``, ``Provider.provision``, ...);
* the platform its nodes' kernel arguments name (``platform_id`` in its registry entry, which
  ``Provider.platform_id`` repeats; docs/design.md, domain rules 4 and 5).

The commands themselves (:mod:`bootserver.provision`) are provider-neutral: the device records (state store), the
wait on the node timeline and the output. Adding a provider is its module, its settings module and one
line in :data:`bootserver.config.providers.REGISTRY`.
"""

from __future__ import annotations

import email.utils
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import tenacity

from bootserver.errors import BootserverError, InputError

log = logging.getLogger("bootserver.providers")

#: The commands whose options a provider declares.
COMMANDS = ("provision", "deprovision", "devices")

T = TypeVar("T")


# --------------------------------------------------------------------------------------------- errors


class ProviderError(BootserverError):
    """A provider call failed at run time (exit 1): an API or BMC error status, a network error, a bad
    answer. ``status`` is the HTTP status when the far end answered, else ``None``."""

    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class ProviderNotFound(ProviderError):
    """The far end answered 404 for a device, a project or a system."""


class MissingCredentials(InputError):
    """No credentials where the config says to find them (exit 2); the message names the variable or file."""


# --------------------------------------------------------------------------------------------- retries


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from an HTTP ``Retry-After`` header (RFC 9110, section 10.2.3: delay-seconds or
    an HTTP-date); ``None`` when absent or unreadable. Never negative."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


@dataclass(frozen=True)
class RetryPolicy:
    """The one retry policy of every HTTP client bootserver's providers use (tenacity).

    A call is tried up to ``retries + 1`` times. Before a retry it waits what the far end asked for
    (``Retry-After`` and the like, read by the caller's ``asked_wait``), capped at ``max_retry_after``
    seconds, else ``backoff * 2**(n - 1)`` seconds before the n-th retry, at most ``backoff_max``.
    ``sleep`` (seconds -> None) does the waiting; tests pass a recorder.
    """

    retries: int = 5
    backoff: float = 1.0
    backoff_max: float = 60.0
    max_retry_after: float = 120.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def run(
        self,
        call: Callable[[], T],
        *,
        what: str,
        retry_on_result: Callable[[T], bool] = lambda result: False,
        retry_on_exception: Callable[[BaseException], bool] = lambda exc: False,
        asked_wait: Callable[[T], float | None] = lambda result: None,
    ) -> T:
        """Call ``call()`` until it returns a result ``retry_on_result`` does not want retried, raises
        an exception ``retry_on_exception`` does not want retried, or the tries run out. Returns the
        last result, or raises the last exception. ``what`` names the call in the log."""

        def wait(state: tenacity.RetryCallState) -> float:
            outcome = state.outcome
            if outcome is not None and not outcome.failed:
                asked = asked_wait(outcome.result())
                if asked is not None:
                    return min(asked, self.max_retry_after)
            return min(self.backoff * 2 ** (state.attempt_number - 1), self.backoff_max)

        def before_sleep(state: tenacity.RetryCallState) -> None:
            outcome = state.outcome
            why = (type(outcome.exception()).__name__ if outcome is not None and outcome.failed
                   else "answer asks for a retry")
            seconds = state.next_action.sleep if state.next_action is not None else 0
            log.debug("%s: %s; try %d of %d in %.1f s", what, why, state.attempt_number + 1,
                     self.retries + 1, seconds)

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.retries + 1),
            wait=wait,
            retry=tenacity.retry_if_exception(retry_on_exception) | tenacity.retry_if_result(retry_on_result),
            sleep=self.sleep,
            before_sleep=before_sleep,
            reraise=True,
            # out of tries: hand back the last answer (or raise the last error) as it is
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        )
        return retrying(call)


# ----------------------------------------------------------------------------------------- options


@dataclass(frozen=True)
class OptionSpec:
    """How one field of a provider's options is given on the command line (the CLI reads it).

    ``flags``: the option strings (``--plan``); ``commands``: the commands that take it (of
    :data:`COMMANDS`); ``help``, ``metavar``, ``choices``: as argparse's; ``parse``: the function
    that turns the text into the value (argparse's ``type``, e.g. ``float``); ``repeatable``: given
    any number of times, the field holds a tuple; ``negatable``: ``--x`` / ``--no-x``, the field holds
    ``True``, ``False`` or ``None`` when neither is given; ``exclusive``: options of one provider
    with the same word may not be given together.
    """

    flags: tuple[str, ...]
    commands: tuple[str, ...] = COMMANDS
    help: str | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    parse: Callable[[str], Any] | None = None
    repeatable: bool = False
    negatable: bool = False
    exclusive: str | None = None


#: The key of a dataclass field's metadata that holds its :class:`OptionSpec`.
OPTION_KEY = "bootserver.option"


def option(*flags: str, default: Any = None, **spec: Any) -> Any:
    """A field of a provider's options dataclass that is a command-line option: ``default`` when the
    option is not given (a tuple for a ``repeatable`` one), ``spec`` the keywords of
    :class:`OptionSpec`. Use as ``plan: str | None = option("--plan", help=...)``."""
    return field(default=default, metadata={OPTION_KEY: OptionSpec(flags, **spec)})


@dataclass(frozen=True)
class ProviderOptions:
    """Base of every provider's options (a frozen dataclass of :func:`option` fields); a provider
    without options uses it as it is."""


# ----------------------------------------------------------------------------------------- interface


@dataclass(frozen=True)
class Outcome:
    """What a provider did to one node.

    ``device`` is the node state's ``device`` member to record (a JSON object with at least
    ``provider``, ``id`` and ``state``), or ``None`` to clear it. ``line`` is the line ``provision`` /
    ``deprovision`` prints for the node on standard output.
    """

    node: str
    device: dict[str, Any] | None
    line: str


@dataclass(frozen=True)
class Poll:
    """One look at a node's device while ``provision`` waits: its provider state word (``active``,
    ``On``, ...), the ``device`` member to record when it changed, and whether the provider says the
    device failed (the wait stops with an error)."""

    state: str
    device: dict[str, Any] | None = None
    failed: bool = False
