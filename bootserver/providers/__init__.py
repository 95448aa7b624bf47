"""Providers: what makes a machine boot from bootserver (Equinix Metal's API, a BMC over Redfish).

:mod:`bootserver.providers.base` holds the interface, the registry and the retry policy; each other
module is one provider. Importing this package imports no provider (the config loads the settings
models it needs; the commands load the provider they use).
"""
