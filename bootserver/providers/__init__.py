"""Providers: what makes a machine boot from bootserver (Equinix Metal's API, a BMC over Redfish or IPMI).

The whole package sits above the config and the URL builder (docs/design.md, Layers):
:mod:`bootserver.providers.base` holds the errors, options, results and the retry policy;
:mod:`bootserver.providers.interface` the interface (``Provider``); :mod:`bootserver.providers.bmc` the
flow both BMC providers share; then one module per provider (``equinix``, ``redfish``, ``ipmi``), and a
provider's own API client apart (``equinix_api``: requests, no config). What the config composes and
checks at load lives in the config package: the providers' registry (:mod:`bootserver.config.providers`)
and each provider's settings model (``config/<name>_settings.py``). Provider clients (requests, sushy)
load when a command uses them.
"""
