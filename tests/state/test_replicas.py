"""Two ``bootserver serve`` replicas on one PostgreSQL state store behave as one server: boot-once,
signatures, key rotation, reinstall and device records across replicas; a database restart in the middle of a run
refuses (503) rather than guesses, loses no event, and both replicas recover by themselves."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support.fake_metal import PROJECT, fake_metal_fixture, metal_env_fixture  # noqa: F401 - fixtures
from support.helpers import free_port, run_cli, write_config
from support.pgcluster import BINDIR, PgCluster
from support.server import ServerProcess

from bootserver.config import load_config

pytestmark = pytest.mark.skipif(BINDIR is None, reason="PostgreSQL is not installed (Debian package postgresql)")


class Replica:
    def __init__(self, root: Path, reference: Path, url: str, publish_kernel: Any) -> None:
        root.mkdir()
        self.port = free_port()
        shutil.copy(reference / "openshift-pointer-master.ign.json", root / "master.ign")
        self.config = write_config(root / "bootserver.yaml", {
            "server": {"listen": f"127.0.0.1:{self.port}", "admin": {"listen": f"127.0.0.1:{free_port()}"}},
            "cache_dir": "cache", "state_dir": "state", "read_through": False,
            "state_store": url,
            "streams": {"rhcos-4.16": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
            "profiles": {"master": {"stream": "rhcos-4.16", "install_dev": "/dev/sda", "ignition": "master.ign"}},
            "nodes": {"master-0": {"profile": "master"}, "master-1": {"profile": "master"},
                      # an Equinix node whose kargs come from its device record (network: provider)
                      "metal-0": {"profile": "master", "network": "provider",
                                  "metal": {"plan": "c3.small.x86", "metro": "da"}}},
        })
        self.kernel = publish_kernel(load_config(str(self.config)), 4096)
        self.server = ServerProcess(self.config, self.port)
        self.url = self.server.url
        self.admin_url = self.server.admin_url

    def on_me(self, url: str) -> str:
        """The same signed path and query on this replica."""
        return re.sub(r"^http://127\.0\.0\.1:[0-9]+", self.url, url)


@pytest.fixture
async def two(
    tmp_path: Path, reference: Path, publish_kernel: Any
) -> AsyncIterator[tuple[PgCluster, Replica, Replica]]:
    cluster = PgCluster()
    try:
        cluster.start()
        url = cluster.create_database("bootserver")
        a = Replica(tmp_path / "a", reference, url, publish_kernel)
        b = Replica(tmp_path / "b", reference, url, publish_kernel)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            await asyncio.gather(a.server.start(http), b.server.start(http))  # both migrate at once
        try:
            yield cluster, a, b
        finally:
            await asyncio.gather(a.server.stop(), b.server.stop())
    finally:
        cluster.destroy()


async def _get(http: aiohttp.ClientSession, url: str, status: int = 200) -> str:
    async with http.get(url) as r:
        body = await r.text()
        assert r.status == status, (url, r.status, body)
        return body


async def _until(check: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)  # poll interval, bounded by the deadline


async def test_two_replicas_behave_as_one_server(two: tuple[PgCluster, Replica, Replica]) -> None:
    _cluster, a, b = two
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        rc, out, err = await run_cli("url", "master-0", "--config", str(a.config))
        assert rc == 0, err
        chain = out.splitlines()[0]
        install = await _get(http, b.on_me(chain))                  # signed by A's config, verified by B
        assert "coreos.inst.install_dev=/dev/sda" in install
        stub_url = re.search(r"coreos\.inst\.ignition_url=(\S+)", install).group(1)
        stub = json.loads(await _get(http, a.on_me(stub_url)))     # the installer reaches replica A
        localboot = await _get(http, b.on_me(chain))                # boot-once holds on B at once
        assert "kernel " not in localboot and localboot.rstrip().endswith("exit 1")
        assert "kernel " not in await _get(http, a.on_me(chain))
        await _get(http, b.on_me(stub["ignition"]["config"]["merge"][0]["source"]))

        rc, out, err = await run_cli("nodes", "reinstall", "master-0", "--config", str(b.config))
        assert rc == 0, err
        again = await _get(http, a.on_me(chain))                    # reinstall reaches A at once
        assert "coreos.inst.install_dev=/dev/sda" in again and again == install.replace(b.url, a.url)

        rc, out, err = await run_cli("keys", "rotate", "--grace", "1h", "--config", str(b.config))
        assert rc == 0 and out.startswith("postgresql://bootserver@127.0.0.1:"), err
        rc, out, err = await run_cli("url", "master-1", "--config", str(b.config))
        new_chain = out.splitlines()[0]

        async def both_verify() -> bool:
            statuses = []
            for replica in (a, b):
                async with http.get(replica.on_me(new_chain)) as r:
                    statuses.append(r.status)
            return statuses == [200, 200]

        await _until(both_verify, 15, "a URL signed with the rotated key is not accepted by both replicas")
        assert "coreos.inst.install_dev" in await _get(http, a.on_me(chain))  # the old key, within its grace

        nodes = json.loads(await _get(http, f"{a.admin_url}/nodes/master-0"))
        assert [(e["event"], e["count"]) for e in nodes["events"]] == [
            ("script", 1), ("stub", 1), ("localboot", 2), ("config", 1), ("reinstall", 1), ("script", 2)]
        # a localboot on each replica for the same client is one row of two, as are the two scripts after


async def test_a_database_restart_mid_run_refuses_then_recovers_and_loses_nothing(
        two: tuple[PgCluster, Replica, Replica]) -> None:
    cluster, a, b = two
    _rc, out, _err = await run_cli("url", "master-1", "--config", str(a.config))
    chain = out.splitlines()[0]
    answered = {200: 0, 503: 0}
    stop = asyncio.Event()

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        async def boot_loop() -> None:
            i = 0
            while not stop.is_set():
                replica = (a, b)[i % 2]
                i += 1
                async with http.get(replica.on_me(chain)) as r:
                    await r.read()
                    assert r.status in answered, r.status
                    answered[r.status] += 1

        async def served(n: int) -> bool:
            return answered[200] >= n

        loop_task = asyncio.create_task(boot_loop())
        slowest = 0.0  # seconds, of an answer while the database is down (once the replica knows it)
        try:
            await _until(lambda: served(20), 30, "scripts not served before the restart")
            await asyncio.to_thread(cluster.stop)
            # while the database is down: scripts are refused, artifacts flow, /readyz says which; once a
            # replica saw the database gone, each answers at once (issue 52: each waited ~3 s for the pool)
            for replica in (a, b):
                assert (await _get(http, replica.on_me(chain), 503)).strip()
                for _ in range(3):
                    started = time.monotonic()
                    async with http.get(replica.url + replica.kernel.path) as r:
                        assert r.status == 200 and await r.read() == replica.kernel.data
                    async with http.get(replica.url + "/readyz") as r:
                        report = await r.json()
                        assert r.status == 503 and report["state_store"] == {"backend": "postgresql",
                                                                             "ready": False}
                    slowest = max(slowest, time.monotonic() - started)
            await asyncio.to_thread(cluster.start)
            back = time.monotonic()
            before = answered[200]
            await _until(lambda: served(before + 20), 60, "the replicas did not recover by themselves")
            recovered = time.monotonic() - back
        finally:
            stop.set()
            await loop_task
        print(f"database down: an artifact and /readyz took {slowest:.2f} s at most; "
              f"20 scripts served again {recovered:.1f} s after the database was back")
        assert slowest < 1.0, f"an artifact and /readyz took {slowest:.2f} s while the database was down"
        assert recovered < 10, f"20 scripts were served again only {recovered:.1f} s after the database was back"
        for replica in (a, b):
            async with http.get(replica.url + "/readyz") as r:
                assert (await r.json())["state_store"]["ready"] is True
        await _get(http, f"{a.admin_url}/nodes")  # commits A's write-behind repeats (B's: the next line)
        events = json.loads(await _get(http, f"{b.admin_url}/nodes/master-1"))["events"]
    scripts = [e for e in events if e["event"] == "script"]
    assert sum(e["count"] for e in scripts) == answered[200]  # every script served has its event
    assert answered[503] >= 2


async def test_a_key_rotated_on_another_replica_while_the_database_is_down_is_503_not_403(
        two: tuple[PgCluster, Replica, Replica]) -> None:
    """Replica A cannot know a key rotated through B once the database is gone: a URL signed with a key
    A does not hold is 503 with ``Retry-After`` (iPXE and Ignition retry) while A cannot read the keys,
    and the truth once it can: 200 for the rotated key, 403 for a key nobody made. Expired and
    malformed signatures stay 403 throughout."""
    from bootserver.signing import sign

    cluster, a, b = two

    def forged_url(replica: Replica) -> str:
        exp = int(time.time()) + 3600
        return f"{replica.url}/ipxe/master-1?exp={exp}&sig={sign(b'z' * 32, 'master-1', '/ipxe/master-1', exp)}"

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        await _get(http, forged_url(a), 403)  # the database answers: a key nobody made is refused
        rc, out, err = await run_cli("keys", "rotate", "--grace", "1h", "--config", str(b.config))
        assert rc == 0, err
        rc, out, err = await run_cli("url", "master-1", "--config", str(b.config))
        assert rc == 0, err
        rotated = a.on_me(out.splitlines()[0])
        await asyncio.to_thread(cluster.stop)

        async def unsure() -> bool:  # A notices it cannot read the keys (a poll or a read failed)
            async with http.get(forged_url(a)) as r:
                return r.status == 503
        await _until(unsure, 15, "a signature no key verifies stays 403 with the database down")
        for url in (forged_url(a), rotated):
            async with http.get(url) as r:
                assert r.status == 503 and r.headers["Retry-After"] == "5", (url, r.status)
                assert "postgresql" not in await r.text()
        expired = re.sub(r"exp=[0-9]+", f"exp={int(time.time()) - 60}", rotated)
        for url in (expired, a.url + "/ipxe/master-1", rotated.replace("&sig=", "&sig=x")):
            await _get(http, url, 403)

        await asyncio.to_thread(cluster.start)

        async def truth() -> bool:
            async with http.get(rotated) as r:
                return r.status == 200
        await _until(truth, 30, "the rotated key is not accepted once the database is back")

        async def refused() -> bool:  # a statement on a connection the restart broke keeps the keys
            async with http.get(forged_url(a)) as r:  # unsure until the next good read (KEYS_POLL)
                assert r.status in (403, 503), r.status
                return r.status == 403
        await _until(refused, 15, "a key nobody made is not refused once the database is back")


async def test_a_device_provisioned_through_one_replica_is_the_others_device(
        two: tuple[PgCluster, Replica, Replica], metal_env: Any) -> None:
    """`provision` through A's config records the device in the database: B's server builds the node's
    network kargs from it, `devices` through B's config finds its project there, `deprovision` through
    B's config deletes it, and both servers then refuse the script (no record: 503)."""
    _cluster, a, b = two
    rc, out, _err = await run_cli("url", "metal-0", "--config", str(a.config))
    chain = out.splitlines()[0]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        assert "run `bootserver provision metal-0` first" in await _get(http, b.on_me(chain), 503)

        rc, out, err = await run_cli("provision", "metal-0", "--no-wait", "--project", PROJECT,
                                     "--config", str(a.config))  # the project on A's command line only
        assert rc == 0, err
        [device] = metal_env.devices.values()
        assert out == f"metal-0 {device['id']} queued 147.75.0.10,2604:1380::a,10.70.0.10\n"
        script = await _get(http, b.on_me(chain))
        assert "ip=147.75.0.10::147.75.0.11:31:metal-0:bond0:none" in script
        assert "bond=bond0:nic0,nic1:mode=802.3ad" in script

        rc, out, err = await run_cli("devices", "--config", str(b.config))
        assert rc == 0, err
        assert out.split() == ["metal-0", device["id"], "queued", "147.75.0.10,2604:1380::a,10.70.0.10", "metal-0"]

        rc, out, err = await run_cli("deprovision", "metal-0", "--config", str(b.config))
        assert (rc, out) == (0, f"metal-0 {device['id']} deleted\n"), err
        assert metal_env.devices == {}
        for replica in (a, b):
            assert "run `bootserver provision metal-0` first" in await _get(http, replica.on_me(chain), 503)


async def test_the_fleet_api_is_one_api_on_both_replicas(two: tuple[PgCluster, Replica, Replica]) -> None:
    """A token made through one replica's config works on both within 2 s and, revoked, fails on both
    within 2 s; the same node created through both at once (If-None-Match: *) is one 201 and one 412;
    two plain PUTs racing are one 201 and one 409 (or 200, unchanged, when it came after)."""
    _cluster, a, b = two
    rc, out, err = await run_cli("tokens", "create", "ci", "--scope", "write", "--config", str(a.config))
    assert rc == 0, err
    auth = {"Authorization": f"Bearer {out.strip()}"}

    async def statuses() -> list[int]:
        got = []
        for replica in (a, b):
            async with http.get(f"{replica.admin_url}/api/v1/nodes/master-0", headers=auth) as r:
                got.append(r.status)
        return got

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        await _until(lambda: _is(statuses(), [200, 200]), 2.0, "a new token is not accepted by both within 2 s")

        async def put(replica: Replica, name: str, **headers: str) -> int:
            async with http.put(f"{replica.admin_url}/api/v1/nodes/{name}", json={"profile": "master"},
                                headers={**auth, **headers}) as r:
                await r.read()
                return r.status

        for _ in range(3):  # the same name through both replicas at once, three times over
            name = f"race-{_}"
            got = sorted(await asyncio.gather(put(a, name, **{"If-None-Match": "*"}),
                                              put(b, name, **{"If-None-Match": "*"})))
            assert got == [201, 412], got
        got = sorted(await asyncio.gather(put(a, "race-plain"), put(b, "race-plain")))
        # one creates; the other lost the insert (409 conflict) or came after it (200, unchanged)
        assert got in ([200, 201], [201, 409]), got
        async with http.get(f"{b.admin_url}/api/v1/nodes/race-plain", headers=auth) as r:
            assert r.status == 200 and (await r.json())["generation"] == 1
        rc, out, err = await run_cli("tokens", "revoke", "ci", "--config", str(b.config))
        assert rc == 0, err
        start = time.monotonic()
        await _until(lambda: _is(statuses(), [401, 401]), 2.0, "a revoked token is still accepted after 2 s")
        assert time.monotonic() - start < 2.0


async def _is(got: Any, want: list[int]) -> bool:
    return await got == want
