"""Boot images: what a machine boots from a virtual CD or a stick rather than over DHCP and PXE.

One shape for every kind of image (docs/design.md, "Boot images"): a **base image** per kind and its
inputs, built once with xorriso (:mod:`.base`), whose node-dependent files all lie in one fixed-size
**region**; a node's image is the base with the node's region written over it (:mod:`.overlay`), so
a further node costs its region on disk (a few KiB) and no build. The modules:

* :mod:`.tools`: the Debian binaries an image is made of, and running them.
* :mod:`.loaders`: the node-independent boot loaders, made once and cached (Debian's ISOLINUX,
  ``ipxe.lkrn`` and a standalone GRUB).
* :mod:`.base`: building a base image with its region, and finding the region in it.
* :mod:`.overlay`: a node's image as base plus region (size, byte ranges, writing it whole).
* :mod:`.network`: a node's boot interface and static address, from its ``network``.
* :mod:`.firmware`: what a machine's firmware loads over the network before it reaches bootserver: the
  standalone arm64 GRUB (``/loaders/grubaa64.efi``, ``bootserver loaders DIR``).
* :mod:`.netboot`: the image that brings up the node's network and chains the node's signed script
  (``bootserver iso NODE``, ``GET /iso/<node>.iso``).

Nothing here imports aiohttp: the web layer sends an image's byte ranges (:meth:`.overlay.NodeImage.pieces`).
"""
