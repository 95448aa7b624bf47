"""bootserver: install Red Hat CoreOS and Fedora CoreOS on Equinix Metal bare metal through custom iPXE.

The package is layered (docs/design.md, Layers; checked by ``lint-imports``): the command line in
``cli`` on top, a thin aiohttp application in ``web``, and below them domain modules that never import
aiohttp's web layer, each importing only the layers under it.
"""

__version__ = "0.1.0"
