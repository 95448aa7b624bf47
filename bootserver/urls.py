"""The one place that builds the URLs bootserver hands out.

Layout (relative to ``server.base_url``, or for artifacts to the node's facility ``base_url``)::

    /ipxe/<node>                                   the node's iPXE script (its chain URL)
    /boot.ipxe?mac=<mac>                           generic entry, node chosen by selector
    /boot.grub?mac=<mac>                           its GRUB form (what the arm64 GRUB sources)
    /loaders/grubaa64.efi                          the standalone arm64 GRUB (arm64 UEFI firmware loads it)
    /loaders/ipxe.efi                              Debian's x86_64 UEFI iPXE (x86_64 UEFI HTTP Boot loads it)
    /loaders/secureboot/<stream>/<file>            a stream's signed shim, GRUB and their GRUB config
    /grub/grub.cfg                                 that GRUB config where Debian's network GRUB looks
    /ignition/<node>                               the node's merge-style Ignition stub
    /ignition/<node>/config                        the node's real Ignition config, byte for byte
    /checkin/<node>                                POST: the node's booted system is up (stage ``up``)
    /grub/<node>                                   the GRUB form of the node's script (the image's UEFI boot)
    /iso/<node>.iso                                the node's boot image (networks without DHCP)
    /artifacts/<stream>/<arch>/<release>/<file>    a cached live PXE artifact

Every per-node URL (chain, stub, real config, check-in) carries ``?exp=<unix seconds>&sig=<base64url>`` from
:class:`bootserver.signing.Signer`, over the node, the route path below the base URL and the expiry.
The real config's URL uses ``server.tls``'s https base URL when HTTPS is configured. Artifact URLs are
not signed (public images), except those of a private release (``streams.<name>.private``: an OpenShift
agent's initramfs holds the cluster's secrets), which carry ``?node=<node>&exp=...&sig=...`` signed over
the node and the artifact's path (:meth:`Urls.artifact`), checked by :meth:`bootserver.http.gate.Gate.artifact_refusal`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, urlsplit

from .config import Config, ResolvedNode
from .signing import Keyring, Signer, verify
from .streams import Artifact, Release

#: The listener a route is served on: ``device`` (``server.listen`` and ``server.tls.listen``, what
#: machines reach) or ``admin`` (``server.admin.listen``, loopback or a Unix socket by default).
DEVICE = "device"
ADMIN = "admin"


@dataclass(frozen=True)
class Route:
    """One route of ``bootserver serve``, declared once in :data:`ROUTES`; the URL builder below, the
    web app (:mod:`bootserver.http.app`: routing, signature check, concurrency cap, handler timeout) and the
    access log and metrics (the ``route`` label is :attr:`pattern`) all read it.

    ``name`` names the handler (``bootserver.http.app.HANDLERS``); ``pattern`` is aiohttp's (``{node}`` is a
    configured node name); ``signed``: refused (403) without a valid signature over the node and
    :meth:`path`; ``real_config``: refused over plain HTTP when ``server.tls`` is set (unless
    ``allow_plain_configs``); ``timed``: cut at ``server.request_timeout``; ``capped``: counted in
    ``server.max_concurrent``; ``listeners``: where it is served (:data:`DEVICE`, :data:`ADMIN`);
    ``method``: the HTTP method it answers (aiohttp answers ``HEAD`` for every ``GET`` route);
    ``in_boot``: a machine asks for it once its boot is under way (after its script), so a storm's
    admission serves it before new arrivals (:mod:`bootserver.http.admission`).
    """

    name: str
    pattern: str
    signed: bool = False
    real_config: bool = False
    timed: bool = True
    capped: bool = True
    listeners: tuple[str, ...] = (DEVICE,)
    method: str = "GET"
    in_boot: bool = False

    def path(self, **params: str) -> str:
        """The route path with ``params`` filled in, percent-encoded (``/ipxe/master-0``): what a
        signature covers."""
        return self.pattern.format(**{k: quote(v) for k, v in params.items()})


CHAIN = Route("chain", "/ipxe/{node}", signed=True)
GENERIC = Route("generic", "/boot.ipxe")
#: A machine that matches no node reports its facts here (bootserver.discovery; server.discovery).
DISCOVER = Route("discover", "/discover")
#: The generic entry in GRUB's form: what the arm64 GRUB (:mod:`bootserver.images.firmware`) sources by the MAC
#: it booted from.
GENERIC_GRUB = Route("generic_grub", "/boot.grub")
#: The standalone arm64 GRUB (:func:`bootserver.images.firmware.arm64_grub`), at a stable path.
LOADER_ARM64 = Route("loader_arm64", "/loaders/grubaa64.efi", timed=False)
#: Debian's x86_64 UEFI iPXE (``ipxe.efi``), what an x86_64 UEFI HTTP Boot loads, then asks for its script.
LOADER_IPXE = Route("loader_ipxe", "/loaders/ipxe.efi", timed=False)
#: A stream's Secure Boot loader set (:mod:`bootserver.images.netsecure`): the release's signed shim
#: (``bootx64.efi``), GRUB (``grubx64.efi``), MokManager and the GRUB config next to them (``grub.cfg``).
LOADER_SECUREBOOT = Route("loader_secureboot", "/loaders/secureboot/{stream}/{file}", timed=False)
#: That GRUB config where Debian's network GRUB looks (its prefix ``/grub`` on the server it came from);
#: routed before :data:`GRUB` (a node named ``grub.cfg`` has its image's GRUB config at ``/grub/grub.cfg``
#: no more).
GRUB_CFG = Route("grub_cfg", "/grub/grub.cfg")
STUB = Route("stub", "/ignition/{node}", signed=True, in_boot=True)
REAL_CONFIG = Route("real_config", "/ignition/{node}/config", signed=True, real_config=True, in_boot=True)
CHECKIN = Route("checkin", "/checkin/{node}", signed=True, method="POST", in_boot=True)
GRUB = Route("grub", "/grub/{node}", signed=True)
ISO = Route("iso", "/iso/{node}.iso", signed=True, timed=False)
ARTIFACT = Route("artifact", "/artifacts/{stream}/{arch}/{release}/{file}", timed=False, in_boot=True)
HEALTHZ = Route("healthz", "/healthz", capped=False, listeners=(DEVICE, ADMIN))
READYZ = Route("readyz", "/readyz", listeners=(DEVICE, ADMIN))
NODES = Route("nodes", "/nodes", listeners=(ADMIN,))
NODE_REPORT = Route("node", "/nodes/{node}", listeners=(ADMIN,))
METRICS = Route("metrics", "/metrics", listeners=(ADMIN,))
#: The live page (:mod:`bootserver.http.page`): the fleet, a node, the cache, the live updates (a
#: long-lived stream: neither timed nor counted in the cap, bounded by the page itself), its static files
#: (two small files the browser asks for at once: not counted in the cap either, so a page that loaded in a
#: storm is never left without its script, and so without live updates).
FLEET = Route("fleet", "/", listeners=(ADMIN,))
PAGE_NODE = Route("page_node", "/ui/nodes/{node}", listeners=(ADMIN,))
PAGE_CACHE = Route("page_cache", "/ui/cache", listeners=(ADMIN,))
PAGE_EVENTS = Route("page_events", "/ui/events", timed=False, capped=False, listeners=(ADMIN,))
PAGE_STATIC = Route("page_static", "/ui/static/{file}", capped=False, listeners=(ADMIN,))

#: Every route of the server, in routing order.
ROUTES: tuple[Route, ...] = (CHAIN, GENERIC, DISCOVER, GENERIC_GRUB, STUB, REAL_CONFIG, CHECKIN, GRUB_CFG, GRUB,
                             ISO, LOADER_ARM64, LOADER_IPXE, LOADER_SECUREBOOT, ARTIFACT, HEALTHZ, READYZ, NODES,
                             NODE_REPORT, METRICS, FLEET, PAGE_NODE, PAGE_CACHE, PAGE_EVENTS, PAGE_STATIC)


class Urls:
    """Build absolute URLs for a config. Node and stream names are checked plain names already.

    ``signer`` signs per-node URLs: a :class:`Signer`, or a function that gives it on first use (a
    server's :attr:`bootserver.runtime.Runtime.signer`, shared by every config it loads); by default one
    over ``keys()`` (default: ``<state_dir>/keys.json``, created on first use) and the wall clock.
    ``family`` is the address family (``4``, ``6``) of the machine the URLs are for: they start with the
    base URL of that family (:meth:`~bootserver.config.ServerConfig.base_url_for`); ``None`` (not known):
    the first one. A signature covers the node, the route path and the expiry, never the base URL, so a
    signed URL is valid on every base URL of the server.
    """

    def __init__(self, config: Config, signer: Signer | Callable[[], Signer] | None = None,
                 keys: Callable[[], Keyring] | None = None, *, family: int | None = None) -> None:
        self.config = config
        self.family = family
        self.base = config.server.base_url_for(family)
        self.https_base = config.server.https_base_url_for(family)
        self._signer = signer
        self._keys = keys or (lambda: Keyring.load_or_create(config.state_dir))
        self._families: dict[int | None, Urls] = {family: self}
        #: (stream, arch, release, file) -> the artifact's URL path: the same for every node (issue 40)
        self._artifact_paths: dict[tuple[str, str, str, str], str] = {}

    def for_family(self, family: int | None) -> Urls:
        """These URLs for a machine asking over address family ``family`` (``4``, ``6``, ``None``): the
        same config and signer, the base URL of that family; made once per family."""
        urls = self._families.get(family)
        if urls is None:
            urls = Urls(self.config, lambda: self.signer, family=family)
            urls._families = self._families
            self._families[family] = urls
        return urls

    @property
    def signer(self) -> Signer:
        """The :class:`Signer` (loading or creating the keys on first use)."""
        signer = self._signer
        if isinstance(signer, Signer):
            return signer
        self._signer = signer = Signer(self._keys()) if signer is None else signer()
        return signer

    def _signed(self, base: str, node: str, path: str, ttl: int) -> str:
        return f"{base}{path}?{self.signer.query(node, path, ttl)}"

    def chain(self, node: str, ttl: int | None = None) -> str:
        """The node's signed chain URL: what a device's iPXE fetches on every network boot
        (``ipxe_script_url``), valid for ``ttl`` seconds (default ``server.signing.chain_ttl``, ten
        years: a device keeps it; ``keys rotate`` revokes it), rounded up to the hour."""
        ttl = self.config.server.signing.chain_ttl if ttl is None else ttl
        return self._signed(self.base, node, CHAIN.path(node=node), ttl)

    @staticmethod
    def expiry_of(url: str) -> int:
        """The ``exp`` (unix seconds) of a signed URL; ``0`` when it has none."""
        exp = parse_qs(urlsplit(url).query).get("exp", ["0"])[0]
        return int(exp) if exp.isdigit() else 0

    def chain_is_current(self, node: str, url: str) -> bool:
        """Whether ``url`` is the node's chain URL as handed out now: same scheme, host and path as
        :meth:`chain`, signed with the current key (not one ``keys rotate`` retired), and valid for at
        least half of ``server.signing.chain_ttl`` more. ``provision`` re-points a device otherwise."""
        have, want = urlsplit(url), urlsplit(self.chain(node))
        if (have.scheme, have.netloc, have.path) != (want.scheme, want.netloc, want.path):
            return False
        query = parse_qs(have.query)
        later = self.signer.now() + self.config.server.signing.chain_ttl / 2
        return verify([self.signer.keyring.current], node, CHAIN.path(node=node), query.get("exp", [None])[0],
                      query.get("sig", [None])[0], later)

    def userdata(self, node: str, ttl: int | None = None) -> str:
        """The ``#!ipxe`` userdata that chains to the node's script (for ``userdata`` instead of a URL)."""
        return f"#!ipxe\nchain --autofree {self.chain(node, ttl)}\n"

    def stub(self, node: str, ttl: int | None = None) -> str:
        """The node's signed merge-style Ignition stub URL, valid ``ttl`` seconds (default
        ``server.signing.install_ttl``; a Secure Boot image, which carries it in its kernel arguments,
        asks for ``chain_ttl``, as long as the image lives).

        Always on the plain base URL: the stub carries the CA that makes our HTTPS trusted.
        """
        ttl = self.config.server.signing.install_ttl if ttl is None else ttl
        return self._signed(self.base, node, STUB.path(node=node), ttl)

    def real_config(self, node: str) -> str:
        """The node's signed real Ignition config URL, which the stub merges (https when TLS is set)."""
        return self._signed(self.https_base or self.base, node, REAL_CONFIG.path(node=node),
                            self.config.server.signing.install_ttl)

    def checkin(self, node: str) -> str:
        """The node's signed check-in URL (``POST``), which the check-in unit of its stub calls once the
        booted system is on the network. Long-lived like the chain URL (``server.signing.chain_ttl``):
        it sits on the installed disk and is called on every boot; ``keys rotate`` revokes it after the
        grace. On the plain base URL, as the stub's."""
        return self._signed(self.base, node, CHECKIN.path(node=node), self.config.server.signing.chain_ttl)

    def grub(self, node: str, ttl: int | None = None) -> str:
        """The node's signed GRUB config URL: the GRUB form of its chain script, which the UEFI boot of
        its boot image fetches. Long-lived like :meth:`chain` (it is written into the image)."""
        ttl = self.config.server.signing.chain_ttl if ttl is None else ttl
        return self._signed(self.base, node, GRUB.path(node=node), ttl)

    def iso(self, node: str, ttl: int | None = None) -> str:
        """The node's signed boot image URL (``/iso/<node>.iso``), what a BMC inserts as virtual media;
        valid for ``ttl`` seconds (default ``server.signing.chain_ttl``), rounded up to the hour."""
        ttl = self.config.server.signing.chain_ttl if ttl is None else ttl
        return self._signed(self.base, node, ISO.path(node=node), ttl)

    def artifact_base(self, node: ResolvedNode) -> str:
        """Base URL for a node's artifacts (the node as resolved): its facility's ``base_url`` of this
        address family when set (:meth:`~bootserver.config.schema.FacilityConfig.base_url_for`), else ours."""
        facility = node.facility
        if facility is not None:
            fb = self.config.facilities[facility].base_url_for(self.family)
            if fb:
                return fb
        return self.base

    def artifact(self, node: ResolvedNode, release: Release, artifact: Artifact) -> str:
        """Where the node (as resolved) fetches one artifact of ``release``: a public URL, or for a private
        release (:attr:`~bootserver.streams.Release.private`) one signed for ``node`` alone, valid
        ``server.signing.install_ttl`` (``?node=<node>&exp=...&sig=...``, the signature over the node and
        the artifact's path), on this server's base URL whatever the node's facility (:meth:`artifact_base`:
        a facility's cache is another server, which holds neither the private files nor their import)."""
        key = (release.stream, release.arch, release.version, artifact.filename)
        path = self._artifact_paths.get(key)
        if path is None:  # made once per release and file, not per node (a node's first script)
            path = self._artifact_paths[key] = ARTIFACT.path(stream=key[0], arch=key[1], release=key[2],
                                                             file=key[3])
        if release.private:  # from this server alone: a facility's cache holds neither the files nor the import
            query = self.signer.query(node.name, path, self.config.server.signing.install_ttl)
            return f"{self.base}{path}?node={quote(node.name)}&{query}"
        return f"{self.artifact_base(node)}{path}"
