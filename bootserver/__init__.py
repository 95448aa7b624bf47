"""bootserver: install Red Hat CoreOS and Fedora CoreOS on bare metal through iPXE and GRUB.

The package is layered (docs/design.md, Layers; checked by ``lint-imports``): the command line in
``cli`` on top, the aiohttp front in the ``http`` package, and below them domain modules (the
artifacts in the ``artifacts`` package among them) that never import aiohttp's web layer, each
importing only the layers under it.
"""

__version__ = "0.1.0"
