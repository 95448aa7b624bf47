"""Load and check bootserver's YAML config into typed, immutable objects.

The keys are the user contract (docs/design.md; documented in README.md and docs/config.md):
``server`` (with ``facility``: the facility this server sits in, whose ``mirrors`` it fetches through),
``cache_dir``, ``state_dir``, ``read_through`` (default true), ``streams`` (with ``keep_releases``,
default 2), ``facilities``, ``profiles``, ``nodes``, ``timeline`` (``keep_events``), and the Equinix Metal
``metal`` mappings (top level, ``profiles.<name>.metal``, ``nodes.<name>.metal``). Every problem becomes one
:class:`~bootserver.errors.ConfigError` reading ``<file>: <key.path>: <what is wrong>``.

This is the one place that reads config. Values that end up inside an iPXE script are checked here
(see :func:`bootserver.ipxe.check_script_word`), so a loaded config can always be rendered safely.

Modules, by concern:

* :mod:`bootserver.values` (below the config, docs/design.md, Layers): value types (name, script-safe
  iPXE word, duration, listen address, MAC, http(s) URL, hostname, CIDR) and
  :class:`~bootserver.values.SettingsModel`;
* :mod:`~bootserver.config.schema`: the settings models and :class:`Config`;
* :mod:`~bootserver.config.providers`: the providers' registry (each one's module, settings key, platform);
* :mod:`~bootserver.config.resolved`: a node resolved (:class:`ResolvedNode`: its settings over its
  profile's over the defaults, in one flat value), the one place that rule is written;
* the providers' settings, one module each: :mod:`~bootserver.config.equinix_settings` (``metal:``),
  :mod:`~bootserver.config.redfish_settings` (``redfish:``), :mod:`~bootserver.config.ipmi_settings`
  (``ipmi:``), both BMCs' on :mod:`~bootserver.config.bmc_settings`;
* :mod:`~bootserver.config.state`: the node state settings (``timeline:``);
* :mod:`~bootserver.config.messages`: pydantic errors into our messages;
* :mod:`~bootserver.config.loader`: reading the file, cross-key checks.

Every name below stays importable from ``bootserver.config``.
"""

from __future__ import annotations

from ..values import (
    HOSTNAME_RE,
    MAC_RE,
    NAME_RE,
    UUID_RE,
    Name,
    SettingsModel,
    YamlList,
    check_http_url,
    normalize_mac,
    parse_networks,
    split_listen,
)
from .equinix_settings import (
    BILLING_CYCLES,
    DEFAULT_TAG,
    BillingCycle,
    Facility,
    MetalGlobal,
    MetalSettings,
    MetalUUID,
    MetalWord,
    is_uuid,
)
from .loader import check_local_inputs, check_real_config, load_config, no_machine_boots, parse_config
from .messages import describe_error, known_keys
from .resolved import ResolvedNode
from .schema import (
    ARCHITECTURES,
    FCOS_STABLE_URL,
    FILE_SOURCE,
    IGNITION_VERSIONS,
    STORE_SOURCE,
    Config,
    Document,
    FacilityConfig,
    Node,
    Profile,
    StreamConfig,
    default_document,
)
from .server import ServerConfig, SigningConfig, TLSConfig

__all__ = [
    "ARCHITECTURES", "BILLING_CYCLES", "DEFAULT_TAG", "FCOS_STABLE_URL", "FILE_SOURCE", "HOSTNAME_RE",
    "IGNITION_VERSIONS", "MAC_RE", "NAME_RE", "STORE_SOURCE", "UUID_RE", "BillingCycle", "Config", "Document",
    "Facility", "FacilityConfig", "MetalGlobal", "MetalSettings", "MetalUUID", "MetalWord", "Name", "Node",
    "Profile", "ResolvedNode", "ServerConfig", "SettingsModel", "SigningConfig", "StreamConfig", "TLSConfig",
    "YamlList", "check_http_url", "check_local_inputs", "check_real_config", "default_document", "describe_error",
    "is_uuid", "known_keys", "load_config", "no_machine_boots", "normalize_mac", "parse_config", "parse_networks",
    "split_listen",
]
