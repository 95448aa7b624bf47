"""The ``bootserver`` command line (argparse).

Every subcommand takes the global options ``--config PATH`` (fallback ``$BOOTSERVER_CONFIG``, then the
embedded default), ``--log-level`` and ``--log-format``, before or after the subcommand's name.
Exit status: 0 ok, 1 runtime failure, 2 bad usage or bad input; errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from . import __version__
from .config import Config, check_local_inputs, load_config, no_machine_boots
from .errors import BootserverError, InputError, UnknownNodeError
from .logs import setup_logging

if TYPE_CHECKING:
    from .signing import Keyring
    from .state import StateStore

# Each subcommand imports the modules it runs inside its function, on purpose: a command loads only what
# it uses (``bootserver nodes`` loads no aiohttp application, ``check-config`` no state store).


def _cmd_serve(args: argparse.Namespace, config: Config) -> int:
    from .state.backends import prepare_store

    check_local_inputs(config)
    workers = config.server.workers if args.workers is None else args.workers
    # a damaged timeline or an unreachable database stops the server here, with or without --workers
    prepare_store(config)
    if workers > 1:
        setup_logging(args.log_level, args.log_format, pid=True)
    warning = no_machine_boots(config)
    if warning is not None:
        logging.getLogger("bootserver.cli").warning("%s", warning)
    if workers > 1:
        from .workers import serve_workers

        return serve_workers(config, workers)
    from .http.listeners import run

    run(config)
    return 0


def _workers_arg(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if not 1 <= n <= 256:
        raise argparse.ArgumentTypeError(f"expected a number of processes from 1 to 256, got {value!r}")
    return n


def _cmd_sync(args: argparse.Namespace, config: Config) -> int:
    from .sync import sync_images

    asyncio.run(sync_images(config, stream=args.stream, facility=args.facility, prune=args.prune))
    return 0


def _node(config: Config, name: str) -> str:
    if name not in config.nodes:
        raise UnknownNodeError(f"{config.source}: nodes: no node {name!r}")
    return name


def _cmd_render(args: argparse.Namespace, config: Config) -> int:
    from .runtime import Runtime
    from .service import BootService

    if args.what != "ignition" and args.ignition_version is not None:
        raise InputError(f"render {args.what}: --version applies to render ignition only")
    node = _node(config, args.node)

    async def render() -> bytes:
        async with Runtime(config) as runtime:
            svc = BootService(config, runtime)
            if args.what == "ipxe":
                return (await svc.script(node)).encode()
            if args.what == "grub":
                return (await svc.script(node, grub=True)).encode()
            return await svc.stub(node, version=args.ignition_version)

    sys.stdout.buffer.write(asyncio.run(render()))
    sys.stdout.flush()
    return 0


def _duration_arg(value: str) -> int:
    from .values import parse_duration

    try:
        return parse_duration(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _grace_arg(value: str) -> int:
    """A ``keys rotate --grace``: a duration, or ``0`` (the previous key stops at once: every URL it
    signed, device chain URLs included, is revoked)."""
    return 0 if value.strip() in ("0", "0s", "0m", "0h", "0d") else _duration_arg(value)


async def _started_store(config: Config) -> StateStore:
    from .state.backends import open_store

    store = open_store(config)
    await store.start()
    return store


async def _keyring(config: Config) -> Keyring:
    """The signing keys of the config's state store (current first), read once; the store is closed."""
    store = await _started_store(config)
    try:
        return store.keyring()
    finally:
        await store.close()


def _cmd_url(args: argparse.Namespace, config: Config) -> int:
    from .urls import Urls

    node = _node(config, args.node)

    ring = asyncio.run(_keyring(config))
    urls = Urls(config, keys=lambda: ring)
    if args.iso:
        chain = urls.iso(node, args.expires)
        print(chain)
    else:
        chain = urls.chain(node, args.expires)
        print(chain)
        print()
        sys.stdout.write(urls.userdata(node, args.expires))
    expires = datetime.fromtimestamp(urls.expiry_of(chain), UTC)
    what = "this URL expires" if args.iso else "these URLs expire"
    print(f"bootserver: {node}: {what} {expires:%Y-%m-%d %H:%M} UTC; `bootserver keys rotate` "
          "revokes them sooner (once its grace ends)", file=sys.stderr)
    return 0


def _cmd_iso(args: argparse.Namespace, config: Config) -> int:
    import time
    from pathlib import Path

    from .images.netboot import node_image
    from .images.network import boot_network
    from .images.overlay import NodeImage
    from .inventory import node_context
    from .urls import Urls

    node = _node(config, args.node)
    device = None
    if node_context(config, node).network == "provider":  # its addresses are in its device record

        async def record() -> dict[str, Any] | None:
            store = await _started_store(config)
            try:
                return await store.device(node)
            finally:
                await store.close()

        device = asyncio.run(record())
    if config.node_secure_boot(node):
        from .runtime import Runtime
        from .service import BootService

        async def build() -> NodeImage:
            async with Runtime(config) as runtime:
                return await BootService(config, runtime).image(node)

        start = time.monotonic()
        image = asyncio.run(build())
        how = f"Secure Boot: the signed shim, GRUB and kernel of stream {config.node_profile(node).stream}"
    else:
        how = boot_network(config, node, device).describe()  # bad input fails before the keys are read
        ring = asyncio.run(_keyring(config))
        start = time.monotonic()
        image = node_image(config, Urls(config, keys=lambda: ring), node, device)
    output = Path(args.output or f"{node}.iso")
    try:
        image.write(output)
    except OSError as e:
        raise InputError(f"{output}: cannot write the image: {e.strerror}") from None
    print(f"bootserver: {node}: wrote {output} ({image.size} bytes, {how}, "
          f"ready in {time.monotonic() - start:.2f} s)", file=sys.stderr)
    return 0


def _cmd_loaders(args: argparse.Namespace, config: Config) -> int:
    from pathlib import Path

    from .images.firmware import write_loaders
    from .images.netsecure import TftpNode, loader_set, secure_boot_streams, write_secureboot_loaders
    from .runtime import Runtime
    from .service import BootService

    arm64 = any(profile.arch == "aarch64" for profile in config.profiles.values())
    base = config.server.base_url_for(4)  # GRUB's http fetches IPv4 and names only
    for path in write_loaders(Path(args.dir), config.cache_dir, base, need_arm64=arm64):
        print(path)
    streams = secure_boot_streams(config)
    if streams:  # the signed shim and GRUB of each secure_boot stream's release, from its live ISO
        async def fetch() -> tuple[dict[str, Path], list[TftpNode]]:
            async with Runtime(config) as runtime:
                svc = BootService(config, runtime)
                sets = {s: await loader_set(config, svc.desk.catalog, svc.desk.artifacts, s) for s in streams}
                nodes = []  # each secure_boot node's own config, for a vendor GRUB without http
                for node, spec in config.nodes.items():
                    if config.node_profile(node).stream in streams and config.node_secure_boot(node):
                        release, (_, kernel, initramfs), kargs = await svc.secure_boot_parts(node)
                        nodes += [TftpNode(node, mac, release.stream, release.version, kernel, initramfs, kargs)
                                  for mac in spec.mac]
                return sets, nodes

        sets, nodes = asyncio.run(fetch())
        for path in write_secureboot_loaders(Path(args.dir), sets, base, nodes):
            print(path)
    return 0


def _cmd_dhcp(args: argparse.Namespace, config: Config) -> int:
    from .dhcp.engine import print_config, run_engine

    if args.print is not None:
        sys.stdout.write(print_config(config, args.print))
        return 0
    return asyncio.run(run_engine(config))


def _cmd_keys_rotate(args: argparse.Namespace, config: Config) -> int:
    grace = config.server.signing.key_grace if args.grace is None else args.grace

    async def rotate() -> str:
        store = await _started_store(config)
        try:
            ring = await store.rotate_keys(grace)
            return str(ring.path) if ring.path is not None else store.name
        finally:
            await store.close()

    where = asyncio.run(rotate())
    print(f"{where}: new signing key; the previous key is accepted for {grace} more seconds")
    return 0


def _cmd_db_migrate(args: argparse.Namespace, config: Config) -> int:
    from .state.backends import migrate_store

    name, before, after, moved = asyncio.run(migrate_store(config))
    print(f"{name}: schema at version {after}" + (f" (was {before})" if before != after else " (up to date)"))
    print("\n".join(moved) if moved else f"{config.state_dir / 'nodes'}: no device record files, nothing to move")
    return 0


def _cmd_tls_init(args: argparse.Namespace, config: Config) -> int:
    from .tls import init_tls, san_names

    names = san_names([config.server.effective_base_url, config.server.https_base_url], args.name)
    paths = init_tls(config.state_dir / "tls", names, force=args.force)
    print(f"{paths['ca.crt'].parent}: CA and server certificate for {', '.join(names)}")
    return 0


def _say(node: str, message: str) -> None:
    print(f"bootserver: {node}: {message}", file=sys.stderr, flush=True)


def _cmd_provision(args: argparse.Namespace, config: Config) -> int:
    from .provision import DeviceFailed, WaitPolicy, provision

    nodes = [_node(config, n) for n in dict.fromkeys(args.nodes)]
    if not args.timeout > 0:
        raise InputError(f"--timeout: must be a positive number of seconds, got {args.timeout:g}")
    base = config.server.effective_base_url
    host = urlsplit(base).hostname or ""
    if host == "localhost" or host.startswith("127.") or host == "::1":
        print(f"bootserver: warning: devices cannot reach the chain URL {base}/ipxe/{nodes[0]}: "
              f"set server.base_url in {config.source}", file=sys.stderr)
    try:
        lines = provision(config, provider_options(args), nodes, wait=not args.no_wait,
                          policy=WaitPolicy(timeout=args.timeout), say=_say)
    except DeviceFailed as e:
        print("\n".join(e.lines))
        raise
    print("\n".join(lines))
    return 0


def _cmd_deprovision(args: argparse.Namespace, config: Config) -> int:
    from .provision import deprovision

    nodes = [_node(config, n) for n in dict.fromkeys(args.nodes)]
    print("\n".join(deprovision(config, provider_options(args), nodes, say=_say)))
    return 0


def _cmd_devices(args: argparse.Namespace, config: Config) -> int:
    from .provision import devices

    lines = devices(config, provider_options(args))
    if lines:
        print("\n".join(lines))
    return 0


def _cmd_check(args: argparse.Namespace, config: Config) -> int:
    from .reload import check_config, summary
    from .values import counted

    check_config(config)  # what a reload checks too
    if config.dhcp is not None:
        from .dhcp.reservations import check_dhcp

        check_dhcp(config)  # against this machine's interface: where `bootserver dhcp` runs
    warning = no_machine_boots(config)
    if warning is not None:
        print(f"bootserver: warning: {warning}", file=sys.stderr)
    included = len(set(config.origins.values()) - {config.source})
    source, held = summary(config).split(": ", 1)
    print(f"{source}: ok: {held}" + (f" ({counted(included, 'included file')}, include: "
                                     f"{', '.join(config.includes)})" if config.includes else ""))
    return 0


def _cmd_reload(args: argparse.Namespace, config: Config) -> int:
    import time

    from .reload import check_config, signal_server, wait_status

    check_config(config)  # an invalid config is refused here, with its file and key; nothing is sent
    sent = time.time()
    pid = signal_server(config)
    engine = _signal_dhcp(config)
    status = wait_status(config, sent, timeout=args.timeout)
    if status is None:
        print(f"bootserver: sent SIGHUP to bootserver serve (process {pid}); no outcome within {args.timeout:g} s: "
              "see its log", file=sys.stderr)
        return 1
    if status.get("result") != "ok":
        print(f"bootserver: reload refused, the running config stays: {status.get('message')}", file=sys.stderr)
        return 2
    print(f"reloaded {status.get('message')}")
    return 0 if engine is None else _dhcp_outcome(config, engine, sent, args.timeout)


def _signal_dhcp(config: Config) -> int | None:
    """SIGHUP to a running ``bootserver dhcp`` of this state_dir (its reservations follow the config)."""
    if config.dhcp is None:
        return None
    from .dhcp.engine import signal_engine

    return signal_engine(config)


def _dhcp_outcome(config: Config, pid: int, sent: float, timeout: float) -> int:
    """Print the outcome of ``bootserver dhcp``'s reload (process ``pid``, signalled at unix time ``sent``)."""
    from .dhcp.engine import wait_engine_status

    status = wait_engine_status(config, sent, timeout)
    if status is None:
        print(f"bootserver: sent SIGHUP to bootserver dhcp (process {pid}); no outcome within {timeout:g} s: "
              "see its log", file=sys.stderr)
        return 1
    if status.get("result") != "ok":
        print(f"bootserver: bootserver dhcp refused the reload, its running config stays: {status.get('message')}",
              file=sys.stderr)
        return 2
    print(f"bootserver dhcp reloaded: {status.get('message')}")
    return 0


def _adopt(args: argparse.Namespace, config: Config) -> int:
    from pathlib import Path

    from .adoption import adopt

    if args.selectable_anywhere:
        print(f"bootserver: warning: node {args.name} is selectable from any address: whoever names its MAC or "
              "UUID gets its script, stub and config (and marks it installed)", file=sys.stderr)

    async def run() -> Any:
        store = await _started_store(config)
        try:
            return await adopt(config, store, args.nodes[0], name=args.name, profile=args.profile,
                               file=None if args.file is None else Path(args.file),
                               addresses=args.addresses and [a for a in args.addresses.split(",") if a.strip()],
                               anywhere=args.selectable_anywhere)
        finally:
            await store.close()

    done = asyncio.run(run())
    print(f"{done.name}: adopted machine {done.machine.mac}" + (f" (uuid {done.machine.uuid})" if done.machine.uuid
                                                                else "") + f" into {done.file}")
    print(f"{done.name}: {done.outcome}")
    return 0


def _cmd_nodes(args: argparse.Namespace, config: Config) -> int:
    import time

    from .fleet import read_fleet
    from .nodes_view import format_events, format_table
    from .timeline import Record

    if args.action == "adopt":
        return _adopt(args, config)
    nodes = [_node(config, name) for name in args.nodes] if args.action != "discovered" else []

    async def run() -> str:
        store = await _started_store(config)
        try:
            if args.action == "discovered":
                from .nodes_view import format_discovered

                return format_discovered(await store.discovered(), time.time())
            if args.action == "reinstall":
                out = []
                for name in nodes:
                    profile = config.node_profile(name)
                    await store.record(Record(name, "reinstall", profile.mode, time.time(),
                                              real_config=profile.ignition is not None))
                    out.append(f"{name}: marked for reinstall; its next boot installs again\n")
                return "".join(out)
            if args.action == "show":
                device = await store.device(nodes[0])  # what provision recorded, if anything
                head = "" if device is None else (f"device: {device.get('provider', 'equinix')} "
                                                  f"{device.get('id', '-')} {device.get('state', '-')}\n")
                return head + format_events(await store.events(nodes[0]), await store.node(nodes[0]),
                                            store.keep_events)
            return format_table(await read_fleet(config, store), time.time())
        finally:
            await store.close()

    sys.stdout.write(asyncio.run(run()))
    return 0


def _add_provider_options(command: str, parser: argparse.ArgumentParser) -> None:
    """Add to ``parser`` the options of ``command`` that the providers declare (the fields of their
    ``options_type``, :func:`bootserver.providers.base.option`): one group per options type, titled by
    the providers that share it (the BMC family's ``deprovision --grace``: Redfish and IPMI)."""
    from dataclasses import fields

    from .providers.base import OPTION_KEY
    from .providers.interface import provider_classes

    titles: dict[type[Any], list[str]] = {}
    for cls in provider_classes():
        titles.setdefault(cls.options_type, []).append(cls.options_title)
    for options_type, title in titles.items():
        specs = [(f.name, f.metadata[OPTION_KEY]) for f in fields(options_type)
                 if OPTION_KEY in f.metadata and command in f.metadata[OPTION_KEY].commands]
        if not specs:
            continue
        group = parser.add_argument_group(", ".join(title))
        exclusive: dict[str, Any] = {}
        for name, spec in specs:
            target: Any = group
            if spec.exclusive or spec.negatable:
                key = spec.exclusive or name
                if key not in exclusive:
                    exclusive[key] = group.add_mutually_exclusive_group()
                target = exclusive[key]
            kwargs: dict[str, Any] = {"dest": name, "help": spec.help}
            if spec.negatable:  # --x / --no-x, not both
                target.add_argument(*spec.flags, action="store_true", default=argparse.SUPPRESS, **kwargs)
                target.add_argument(*(f"--no-{flag[2:]}" for flag in spec.flags), dest=name,
                                    action="store_false", default=argparse.SUPPRESS)
                continue
            if spec.repeatable:
                kwargs["action"] = "append"
            if spec.metavar:
                kwargs["metavar"] = spec.metavar
            if spec.choices:
                kwargs["choices"] = list(spec.choices)
            if spec.parse:
                kwargs["type"] = spec.parse
            # not given: the attribute stays unset and the options dataclass applies its default
            target.add_argument(*spec.flags, default=argparse.SUPPRESS, **kwargs)


def provider_options(args: argparse.Namespace) -> dict[str, Any]:
    """Each provider's typed options (its ``options_type``) from a parsed command line: provider
    name -> options object; an option the command does not take, or that was not given, has its
    default. Built once per command, passed to :mod:`bootserver.provision`."""
    from dataclasses import fields

    from .providers.base import OPTION_KEY
    from .providers.interface import provider_classes

    out: dict[str, Any] = {}
    for cls in provider_classes():
        given = {}
        for f in fields(cls.options_type):
            if OPTION_KEY in f.metadata and hasattr(args, f.name):
                value = getattr(args, f.name)
                given[f.name] = tuple(value) if f.metadata[OPTION_KEY].repeatable else value
        out[cls.name] = cls.options_type(**given)
    return out


LOG_LEVELS = ["debug", "info", "warning", "error"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand of the user contract."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", help="config file (default: $BOOTSERVER_CONFIG, "
                        "else the embedded default)")
    common.add_argument("--log-level", choices=LOG_LEVELS, help="(default info)")
    common.add_argument("--log-format", choices=["text", "json"],
                        help="log lines as text or as one JSON object per line (default text)")
    parser = argparse.ArgumentParser(prog="bootserver", description="Boot CoreOS on bare metal through iPXE.",
                                     epilog="The global options work before or after COMMAND; one given "
                                     "after it wins.")
    parser.add_argument("--version", action="version", version=f"bootserver {__version__}")
    # also before the subcommand (`bootserver --config x.yaml check-config`); one given after it wins
    parser.add_argument("--config", dest="config_before", metavar="PATH", help="config file (default: "
                        "$BOOTSERVER_CONFIG, else the embedded default)")
    parser.add_argument("--log-level", dest="log_level_before", choices=LOG_LEVELS, help="(default info)")
    parser.add_argument("--log-format", dest="log_format_before", choices=["text", "json"],
                        help="log lines as text or as one JSON object per line (default text)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", parents=[common], help="run the HTTP server")
    p.add_argument("--workers", type=_workers_arg, metavar="N",
                   help="serve with N worker processes sharing the ports (default server.workers, 1)")
    p.set_defaults(func=_cmd_serve)
    p = sub.add_parser("sync-images", parents=[common], help="download artifacts into the cache")
    p.add_argument("--stream", help="only this stream")
    p.add_argument("--facility", help="only the profiles of nodes in this facility; use its mirrors")
    p.add_argument("--prune", action="store_true",
                   help="then remove cached releases no profile references (keeps streams.*.keep_releases)")
    p.set_defaults(func=_cmd_sync)
    p = sub.add_parser("render", parents=[common], help="print what the server sends a node")
    p.add_argument("what", choices=["ipxe", "grub", "ignition"])
    p.add_argument("node")
    p.add_argument("--version", dest="ignition_version", metavar="X.Y.Z",
                   help="ignition: the stub in this Ignition spec version (3.1.0 up to the profile's "
                   "ignition_version, the default), as a client accepting at most X.Y.Z gets it")
    p.set_defaults(func=_cmd_render)
    p = sub.add_parser("url", parents=[common], help="print a node's chain URL and #!ipxe userdata")
    p.add_argument("node")
    p.add_argument("--iso", action="store_true", help="print the node's signed boot image URL instead "
                   "(/iso/NODE.iso, what a BMC inserts as virtual media)")
    p.add_argument("--expires", type=_duration_arg, metavar="DURATION",
                   help="validity, e.g. 24h or 7d (default server.signing.chain_ttl, 3650d); rounded up to the hour")
    p.set_defaults(func=_cmd_url)
    p = sub.add_parser("iso", parents=[common], help="write a node's boot image (ISO 9660) for a network "
                       "without DHCP", description="Write a bootable ISO 9660 image that brings up the node's "
                       "boot interface with its static address from its network (no DHCP) and chains to its "
                       "signed chain URL. A node without a static network gets an image that asks DHCP.")
    p.add_argument("node")
    p.add_argument("--output", "-o", metavar="FILE", help="where to write the image (default NODE.iso)")
    p.set_defaults(func=_cmd_iso)
    p = sub.add_parser("loaders", parents=[common], help="write the boot loaders of a TFTP root into a folder",
                       description="Write into DIR what a DHCP server's TFTP root hands machines' firmware: the "
                       "standalone arm64 GRUB (grubaa64.efi, client architecture 11), which sources this "
                       "server's /boot.grub?mac=..., and Debian's iPXE for x86_64 (ipxe.efi, undionly.kpxe). "
                       "One path per line on stdout.")
    p.add_argument("dir", metavar="DIR")
    p.set_defaults(func=_cmd_loaders)
    p = sub.add_parser("dhcp", parents=[common], help="run the DHCP and TFTP engine (dnsmasq) of the dhcp: "
                       "mapping in the foreground, or print its configuration")
    p.add_argument("--print", nargs="?", const="dnsmasq", choices=("dnsmasq", "kea"), default=None,
                   help="print the configuration (dnsmasq options, or kea: Kea's Dhcp4 JSON) and exit")
    p.set_defaults(func=_cmd_dhcp)
    p = sub.add_parser("keys", help="manage the URL signing keys in state_dir")
    ksub = p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    k = ksub.add_parser("rotate", parents=[common], help="make a new signing key; the old one stays "
                        "valid for a grace period")
    k.add_argument("--grace", type=_grace_arg, metavar="DURATION",
                   help="how long the previous key is still accepted (default server.signing.key_grace, 24h); "
                   "0 revokes every URL it signed at once")
    k.set_defaults(func=_cmd_keys_rotate)
    p = sub.add_parser("tls", help="manage the HTTPS certificate")
    tsub = p.add_subparsers(dest="tls_command", required=True, metavar="ACTION")
    t = tsub.add_parser("init", parents=[common], help="create a CA and a server certificate in state_dir/tls")
    t.add_argument("--name", action="append", default=[], metavar="NAME",
                   help="extra DNS name or IP address for the certificate (repeatable)")
    t.add_argument("--force", action="store_true", help="replace existing files")
    t.set_defaults(func=_cmd_tls_init)
    p = sub.add_parser("reload", parents=[common], help="make the running server read its config again",
                       description="Check the config as check-config does, then signal the bootserver serve of "
                       "its state_dir (state_dir/serve.pid) to reload it, and wait for the outcome. Same as "
                       "SIGHUP or `systemctl reload bootserver`.")
    p.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS",
                   help="how long to wait for the server's outcome (default 15)")
    p.set_defaults(func=_cmd_reload)
    p = sub.add_parser("check-config", parents=[common], help="check the config and exit")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("provision", parents=[common],
                       help="make each node boot from this server with its provider, and follow its install",
                       description="Each node's provider (profiles.<p>.provider / nodes.<n>.provider: equinix, "
                       "redfish, ipmi) makes it boot from this server; then the node timeline is followed until "
                       "the node is up (its system checked in; with checkin: false, installed in install mode "
                       "or running in live mode).")
    p.add_argument("nodes", nargs="+", metavar="NODE")
    p.add_argument("--no-wait", action="store_true", help="return once the devices are set up")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="SECONDS",
                   help="give up waiting for up (or installed/running) after SECONDS (default 1800)")
    p.set_defaults(func=_cmd_provision)
    _add_provider_options("provision", p)
    p = sub.add_parser("deprovision", parents=[common], help="undo provision: delete the device or power it off")
    p.add_argument("nodes", nargs="+", metavar="NODE")
    p.set_defaults(func=_cmd_deprovision)
    _add_provider_options("deprovision", p)
    p = sub.add_parser("devices", parents=[common], help="list the devices bootserver manages, with their stage")
    p.set_defaults(func=_cmd_devices)
    _add_provider_options("devices", p)
    p = sub.add_parser("nodes", parents=[common], help="show each node's boot stage; mark nodes for reinstall; "
                       "list and adopt discovered machines",
                       description="Without an action: a table of every node's stage and how long ago. "
                       "'show NODE': the node's events. 'reinstall NODE...': the next boot installs again. "
                       "'discovered': the machines that matched no node and wait to be adopted. "
                       "'adopt MAC|UUID --name NAME --profile PROFILE [--file PATH]': make one a node "
                       "(a file its include: names, default nodes.d/NAME.yaml) and reload the server.")
    p.add_argument("action", nargs="?", choices=["list", "show", "reinstall", "discovered", "adopt"], default="list")
    p.add_argument("nodes", nargs="*", metavar="NODE")
    p.add_argument("--name", help="adopt: the node's name (and hostname)")
    p.add_argument("--profile", help="adopt: the node's profile")
    p.add_argument("--file", metavar="PATH", help="adopt: the file to write (default nodes.d/NAME.yaml beside the "
                   "config; the config's include: must read it)")
    p.add_argument("--addresses", metavar="IP[,CIDR...]", help="adopt: the addresses the node may boot from "
                   "(default: the one the machine reported from)")
    p.add_argument("--selectable-anywhere", action="store_true", help="adopt: hand the node's script to any "
                   "address that names its MAC or UUID (not only its addresses)")
    p.set_defaults(func=_cmd_nodes)
    p = sub.add_parser("db", help="manage the state store's schema")
    dsub = p.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    d = dsub.add_parser("migrate", parents=[common], help="create or upgrade the state store's schema (the "
                        "sqlite timeline in state_dir, or the state_store database), move the device records "
                        "of state_dir/nodes/*.json into it (once), and exit")
    d.set_defaults(func=_cmd_db_migrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bootserver`` console script. Returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "nodes":
        wanted = {"list": (0, 0), "show": (1, 1), "reinstall": (1, None), "discovered": (0, 0),
                  "adopt": (1, 1)}[args.action]
        if len(args.nodes) < wanted[0] or (wanted[1] is not None and len(args.nodes) > wanted[1]):
            parser.error(f"nodes {args.action}: expected "
                         + ("MAC or UUID" if args.action == "adopt" else "no NODE" if wanted[1] == 0
                            else "one NODE" if wanted[1] == 1 else "NODE..."))
        if args.action == "adopt" and (not args.name or not args.profile):
            parser.error("nodes adopt: --name NAME and --profile PROFILE are required")
        if args.action != "adopt" and (args.name or args.profile or args.file or args.addresses
                                       or args.selectable_anywhere):
            parser.error(f"nodes {args.action}: --name, --profile, --file, --addresses and --selectable-anywhere "
                         "are options of nodes adopt")
    # a global option given after COMMAND wins over the same one before it
    for name, default in (("config", None), ("log_level", "info"), ("log_format", "text")):
        if getattr(args, name, None) is None:
            setattr(args, name, getattr(args, f"{name}_before") or default)
    setup_logging(args.log_level, args.log_format)
    try:
        config = load_config(args.config)
        rc = args.func(args, config)
        sys.stdout.flush()  # here, where a closed pipe can still be caught
        return rc
    except BootserverError as e:
        print(f"bootserver: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `bootserver url NODE | head -1`: the reader went away; no traceback, and no second
        # error when Python flushes stdout at exit (the pattern of the Python docs, "Note on SIGPIPE")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by a closed pipe


if __name__ == "__main__":
    sys.exit(main())
