"""bootserver: install Red Hat CoreOS and Fedora CoreOS on Equinix Metal bare metal through custom iPXE.

The package is layered: pure domain modules (config, streams, store, fetch, inventory, urls, ipxe,
ignition) that never import aiohttp's web layer, a thin aiohttp application in ``web``, and the
command line in ``cli``.
"""

__version__ = "0.1.0"
