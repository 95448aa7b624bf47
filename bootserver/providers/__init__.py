"""Providers: what makes a machine boot from bootserver (Equinix Metal's API, a BMC over Redfish).

:mod:`bootserver.providers.base` holds the registry (module, settings key, platform), the errors, options
and results and the retry policy, below the config; :mod:`bootserver.providers.interface` holds the
interface (``Provider``), above it. Each provider
is two modules: its settings model (``<name>_settings``, below the config, which composes them) and the
provider itself (``<name>``, above the config and the URL builder it uses); a provider with its own
API client keeps it apart (``equinix_api``: requests, no config). Provider clients (requests, sushy)
load when a command uses them. The layers are in docs/design.md.
"""
