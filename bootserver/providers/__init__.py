"""Providers: what makes a machine boot from bootserver (Equinix Metal's API, a BMC over Redfish).

:mod:`bootserver.providers.base` holds the interface, the registry and the retry policy; each other
module is one provider, which owns its settings model. The config schema names those models, so the
config is loaded first, whichever module is imported first (the import order config -> provider
settings is the only one that works). Provider clients (requests, sushy) load when a command uses them.
"""

import bootserver.config  # noqa: F401 - see above: the config before any provider module
