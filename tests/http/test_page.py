"""The live page on the admin listener, in a real browser (Debian's chromium driven by Playwright, one
for the session: conftest's ``browser``), against a real ``serve`` subprocess whose nodes the test boots
by hand: their scripts, artifacts, stubs, real configs, and the check-in command taken from the stub's
own unit."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml
from playwright.async_api import Browser, Page, expect
from support.helpers import checkin_command, run_cli, write_config
from support.server import ServerProcess
from support.upstreams import Upstream

#: How long a live update may take to reach the browser (the issue's target).
LIVE = 2000  # ms


#: The browser tests share the session's chromium, so they run on the session's event loop, as do the
#: async fixtures they await during their run (``upstream`` here, ``fleet``).
session_loop = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(loop_scope="session")
async def upstream() -> AsyncIterator[Upstream]:
    """conftest's ``upstream`` on the session's event loop (``boot_setup`` takes this one here)."""
    async with Upstream.serving() as up:
        yield up


class Fleet:
    """A running ``serve`` with nodes ``m-0``, ``m-1`` and ``m-2`` (install mode, real config) and an HTTP
    session; what a device and an operator do to it."""

    def __init__(self, setup: Any, server: ServerProcess, http: aiohttp.ClientSession) -> None:
        self.setup, self.server, self.http = setup, server, http
        self.config = str(setup.config)

    async def cli(self, *args: str) -> str:
        rc, out, err = await run_cli(*args, "--config", self.config)
        assert rc == 0, err
        return out

    async def get(self, url: str, **kw: Any) -> bytes:
        async with self.http.get(url, **kw) as r:
            assert r.status == 200, (url, r.status)
            return await r.read()

    async def script(self, node: str) -> str:
        """The node's iPXE script, through its chain URL (as its iPXE would)."""
        return (await self.get((await self.cli("url", node)).splitlines()[0])).decode()

    async def stub(self, script: str) -> dict[str, Any]:
        return json.loads(await self.get(re.search(r"coreos\.inst\.ignition_url=(\S+)", script).group(1)))


@pytest_asyncio.fixture(loop_scope="session")
async def fleet(boot_setup, request) -> AsyncIterator[Fleet]:
    """``serve`` with three nodes; ``@pytest.mark.parametrize("fleet", [{...}], indirect=True)`` adds
    top-level config keys (e.g. ``timeline``), ``server.admin`` keys under ``admin``, other ``server`` keys
    under ``server_limits``."""
    setup = boot_setup(20_000, {"m-0": {"profile": "master", "mac": ["52:54:00:00:00:10"]},
                                "m-1": {"profile": "master", "mac": ["52:54:00:00:00:11"]},
                                "m-2": {"profile": "master", "mac": ["52:54:00:00:00:12"]}})
    extra = dict(getattr(request, "param", {}))
    doc = yaml.safe_load(setup.config.read_text())
    if "admin" in extra:
        doc["server"]["admin"] = extra.pop("admin")
    doc["server"].update(extra.pop("server_limits", {}))
    doc.update(extra)
    write_config(setup.config, doc)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        server = ServerProcess(setup.config, setup.port)
        await server.start(http)
        try:
            yield Fleet(setup, server, http)
        finally:
            await server.stop()


async def open_page(browser: Browser, url: str, **context: Any) -> Page:
    page = await (await browser.new_context(**context)).new_page()
    await page.goto(url)
    await expect(page.locator("#live")).to_have_text("live updates: on", timeout=5000)
    return page


def stage_of(page: Page, node: str):
    return page.locator(f"#node-{node} [data-f=stage]")


@session_loop
async def test_fleet_rows_follow_a_whole_install_live_without_reload(browser: Browser, fleet: Fleet) -> None:
    page = await open_page(browser, fleet.server.admin_url + "/")
    await expect(page.locator("#fleet tbody tr")).to_have_count(3)
    await expect(page.locator("[data-count=new] b")).to_have_text("3")
    await page.evaluate("window.notReloaded = true")

    script = await fleet.script("m-0")                                    # iPXE
    await expect(stage_of(page, "m-0")).to_have_text("ipxe", timeout=LIVE)
    kernel = script.split("\nkernel ", 1)[1].split()[0]
    await fleet.get(kernel)                                               # iPXE fetches the kernel
    await expect(stage_of(page, "m-0")).to_have_text("kernel", timeout=LIVE)
    stub = await fleet.stub(script)                                       # coreos-installer
    await expect(stage_of(page, "m-0")).to_have_text("installing", timeout=LIVE)
    await fleet.get(stub["ignition"]["config"]["merge"][0]["source"])    # the installed system's Ignition
    await expect(stage_of(page, "m-0")).to_have_text("installed", timeout=LIVE)
    # the check-in: the unit's own command, taken from the stub `render ignition` prints, run here
    rendered = json.loads(await fleet.cli("render", "ignition", "m-0"))
    proc = await asyncio.create_subprocess_exec(*checkin_command(rendered), stdout=asyncio.subprocess.PIPE)
    assert (await asyncio.wait_for(proc.communicate(), 60))[0] == b"m-0: up\n"
    await expect(stage_of(page, "m-0")).to_have_text("up", timeout=LIVE)

    row = page.locator("#node-m-0")
    await expect(row.locator("[data-f=ip]")).to_have_text("127.0.0.1")
    await expect(row.locator("[data-f=last]")).to_contain_text("checkin")
    await expect(page.locator("[data-count=up] b")).to_have_text("1")
    await expect(page.locator("[data-count=new] b")).to_have_text("2")
    assert await page.evaluate("window.notReloaded") is True
    # the same stage as `bootserver nodes`
    nodes = {line.split()[0]: line.split()[2] for line in (await fleet.cli("nodes")).splitlines()[1:]}
    assert nodes == {"m-0": "up", "m-1": "new", "m-2": "new"}


@pytest.mark.parametrize("fleet", [{"timeline": {"stall_after": {"ipxe": "2s"}}}], indirect=True)
@session_loop
async def test_a_node_whose_stage_timer_runs_out_shows_stalled(browser: Browser, fleet: Fleet) -> None:
    page = await open_page(browser, fleet.server.admin_url + "/")
    await fleet.script("m-1")
    row = page.locator("#node-m-1")
    await expect(row.locator("[data-f=stage]")).to_have_text("ipxe", timeout=LIVE)
    await expect(row).to_have_class(re.compile(r"\bstalled\b"), timeout=2000 + LIVE)
    await expect(row.locator("[data-f=stalled]")).to_contain_text("stalled")
    await expect(page.locator("#stalled-count")).to_have_text("1")
    await expect(page.locator("#node-m-0")).not_to_have_class(re.compile("stalled"))
    # a reload renders it stalled too (server side)
    await page.reload()
    await expect(page.locator("#node-m-1")).to_have_class(re.compile(r"\bstalled\b"))


@session_loop
async def test_node_page_shows_what_render_prints_its_events_and_stage_bars(browser: Browser, fleet: Fleet) -> None:
    script = await fleet.script("m-2")
    await fleet.stub(script)

    async def printed() -> list[str]:
        return [await fleet.cli("render", "ipxe", "m-2"), await fleet.cli("render", "ignition", "m-2"),
                (await fleet.cli("url", "m-2")).splitlines()[0]]
    # Signed URLs expire on the hour (rounded up): what the CLI prints just before and just after the page
    # is read brackets it, so a run across an hour boundary still compares like with like.
    before = await printed()
    page = await open_page(browser, fleet.server.admin_url + "/ui/nodes/m-2")
    shown_texts = [await page.locator(f"#{part}").text_content() for part in ("script", "stub", "chain")]
    after = await printed()
    for text, b, a in zip(shown_texts, before, after, strict=True):
        assert text in (b, a), (text, b, a)
    shown = await page.locator("table.events tbody tr td:nth-child(2)").all_text_contents()
    listed = [line.split()[2] for line in (await fleet.cli("nodes", "show", "m-2")).splitlines()]
    assert shown == listed == ["script", "stub"]
    # one bar per stage: ipxe (until the stub) and installing (still running: until now)
    await expect(page.locator("svg.bars text.label")).to_have_text(["ipxe", "installing"])
    await expect(page.locator("svg.bars rect")).to_have_count(2)
    # a new event of this node updates the page without a reload
    await page.evaluate("window.notReloaded = true")
    await fleet.get(json.loads(await fleet.cli("render", "ignition", "m-2"))["ignition"]["config"]["merge"][0]
                    ["source"])
    await expect(page.locator("table.events tbody tr")).to_have_count(3, timeout=LIVE)
    await expect(page.locator(".facts .stage")).to_have_text("installed")
    assert await page.evaluate("window.notReloaded") is True


@session_loop
async def test_filter_by_stage_and_search_by_name_or_mac_with_the_keyboard(browser: Browser, fleet: Fleet) -> None:
    await fleet.script("m-1")
    page = await open_page(browser, fleet.server.admin_url + "/")
    # keyboard only: Tab reaches the skip link, the navigation, the stage counts, the filter, the node links
    reached = []
    for _ in range(40):
        await page.keyboard.press("Tab")
        reached.append(await page.evaluate(
            "(() => { const e = document.activeElement; return e.id || e.getAttribute('href') || e.tagName })()"))
    assert reached[0] == "#main" and "/?stage=ipxe" in reached and "q" in reached and "stage" in reached
    assert "/ui/nodes/m-0" in reached and "/ui/cache" in reached
    await page.focus("#q")
    await page.keyboard.type("00:11")
    await expect(page.locator("#fleet tbody tr:visible")).to_have_count(1)
    await expect(page.locator("#fleet tbody tr:visible th")).to_have_text("m-1")
    await page.keyboard.press("Enter")  # the form works without the script too: server-side filter
    # the state the form's own navigation brings: the server's page for ?q=00:11 (the script's replaceState
    # had already put q in the URL, and it never sets the table's data-query or the "shown" count)
    await expect(page.locator("#fleet")).to_have_attribute("data-query", "00:11")
    await expect(page.locator("#shown")).to_have_text("1")
    await expect(page.locator("#fleet tbody tr:visible")).to_have_count(1)
    plain = await (await browser.new_context(java_script_enabled=False)).new_page()  # no script at all
    await plain.goto(fleet.server.admin_url + "/?q=00%3A11")
    await expect(plain.locator("#fleet tbody tr:visible th")).to_have_text("m-1")
    await page.goto(fleet.server.admin_url + "/?stage=new")
    await expect(page.locator("#fleet tbody tr:visible")).to_have_count(2)
    await page.select_option("#stage", "ipxe")
    await expect(page.locator("#fleet tbody tr:visible th")).to_have_text("m-1")


@pytest.mark.parametrize("size", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}])
@session_loop
async def test_pages_fit_a_laptop_and_a_phone(browser: Browser, fleet: Fleet, size: dict[str, int]) -> None:
    await fleet.script("m-0")
    for path in ("/", "/ui/nodes/m-0", "/ui/cache"):
        page = await (await browser.new_context(viewport=size)).new_page()
        await page.goto(fleet.server.admin_url + path)
        # nothing but the tables' and code blocks' own scroll areas is wider than the screen
        assert await page.evaluate("document.documentElement.scrollWidth") <= size["width"], path
        await expect(page.locator("h1")).to_be_visible()
    page = await (await browser.new_context(viewport=size)).new_page()
    await page.goto(fleet.server.admin_url + "/")
    await expect(page.locator("#node-m-0 th a")).to_be_visible()
    await expect(page.locator("#node-m-0 [data-f=stage]")).to_be_visible()
    await expect(page.locator("#node-m-0 [data-f=stalled]")).to_be_visible()


@session_loop
async def test_cache_page_lists_the_current_release_and_its_state(browser: Browser, fleet: Fleet) -> None:
    await fleet.cli("sync-images")
    page = await (await browser.new_context()).new_page()
    await page.goto(fleet.server.admin_url + "/ui/cache")
    release = fleet.setup.doc["architectures"]["x86_64"]["artifacts"]["metal"]["release"]
    await expect(page.locator("h2").first).to_contain_text(f"rhcos-4.16 / x86_64 / {release}")
    await expect(page.locator("main table tbody tr")).to_have_count(3)
    await expect(page.locator(".state-verified")).to_have_count(3)
    await expect(page.locator("main table tbody")).to_contain_text("19.5 KiB")  # 20,000 bytes each


@session_loop
async def test_the_page_is_absent_from_the_device_listener(fleet: Fleet) -> None:
    for path in ("/", "/ui/nodes/m-0", "/ui/cache", "/ui/events", "/ui/static/page.js", "/nodes", "/metrics"):
        async with fleet.http.get(fleet.server.url + path) as r:
            assert r.status == 404, path


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "admin.token"
    path.write_text("s3cr3t-admin-token-0123456789\n")
    return path


@pytest.mark.parametrize("fleet", [{"admin": {"token_file": "admin.token"}}], indirect=True)
@session_loop
async def test_with_a_token_file_the_page_nodes_and_metrics_need_the_token(browser: Browser, token_file: Path,
                                                                          fleet: Fleet) -> None:
    admin = fleet.server.admin_url
    for path in ("/", "/ui/nodes/m-0", "/ui/events", "/nodes", "/metrics"):
        async with fleet.http.get(admin + path) as r:
            assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer"), path
        async with fleet.http.get(admin + path, headers={"Authorization": "Bearer wrong-token"}) as r:
            assert r.status == 403, path
    token = {"Authorization": "Bearer s3cr3t-admin-token-0123456789"}
    async with fleet.http.get(admin + "/metrics", headers=token) as r:
        assert r.status == 200
    async with fleet.http.get(admin + "/healthz") as r:
        assert r.status == 200  # probes stay open
    # a browser: /?token= once sets the cookie; then the page and its live updates work
    page = await (await browser.new_context()).new_page()
    response = await page.goto(admin + "/")
    assert response is not None and response.status == 401
    await page.goto(admin + "/?token=s3cr3t-admin-token-0123456789")
    assert page.url == admin + "/"
    await expect(page.locator("#live")).to_have_text("live updates: on", timeout=5000)
    await fleet.script("m-2")
    await expect(stage_of(page, "m-2")).to_have_text("ipxe", timeout=LIVE)


@pytest.mark.parametrize(("admin", "token", "message"), [
    ({"listen": "0.0.0.0:9181"}, None,
     "server.admin.token_file: required when server.admin.listen (0.0.0.0:9181) is not a loopback address"),
    ({"listen": "127.0.0.1:9181", "token_file": "admin.token"}, "short\n",
     "server.admin.token_file: {dir}/admin.token: the token (its first line) must be at least 16 characters"),
    ({"listen": "127.0.0.1:9181", "token_file": "missing.token"}, None,
     "server.admin.token_file: cannot read {dir}/missing.token: No such file or directory"),
])
async def test_an_unguarded_or_bad_admin_token_is_refused_at_start(tmp_path: Path, reference: Path, admin: dict,
                                                                   token: str | None, message: str) -> None:
    if token is not None:
        (tmp_path / "admin.token").write_text(token)
    path = write_config(tmp_path / "c.yaml", {
        "server": {"listen": "127.0.0.1:9180", "admin": admin},
        "streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}}})
    for command in ("check-config", "serve"):
        rc, _, err = await run_cli(command, "--config", str(path), timeout=30)
        assert rc == 2 and message.format(dir=tmp_path) in err and err.count("\n") == 1, (command, err)


def test_stage_spans_replay_the_history_and_the_current_stage_runs_until_now() -> None:
    from bootserver.http.page import stage_spans
    from bootserver.timeline import Event

    events = [Event("n", 100.0, "script"), Event("n", 110.0, "kernel-requested"), Event("n", 105.0, "stub"),
              Event("n", 130.0, "stub"), Event("n", 400.0, "config")]
    spans = stage_spans(events, "install", real_config=True, final=("up",), now=1000.0)
    # the stub recorded late (105 < 110) does not change the stage, as in the timeline
    assert [(s["stage"], s["start"], s["seconds"]) for s in spans] == [
        ("ipxe", 100.0, 10.0), ("kernel", 110.0, 20.0), ("installing", 130.0, 270.0), ("installed", 400.0, 600.0)]
    spans = stage_spans(events, "install", real_config=True, final=("installed",), now=1000.0)
    assert spans[-1]["seconds"] is None  # a final stage does not run on


async def test_cache_page_shows_a_download_in_progress_with_its_progress(tmp_path: Path, reference: Path, faulty,
                                                                        aiohttp_client) -> None:
    """A rootfs held halfway by the upstream: the cache page lists it as fetching, with bytes so far of
    its size, and the kernel fetched before it as verified."""
    from support.upstreams import payload, rewrite_stream

    from bootserver.artifacts.upstream import RetryPolicy
    from bootserver.config import parse_config
    from bootserver.http.app import ADMIN_APP, SERVICE, create_app

    sizes = {"kernel": 100_000, "initramfs": 200_000, "rootfs": 3_000_000}
    doc, files = rewrite_stream(reference / "rhcos-stream-4.16.json", faulty.url,
                                {k: payload(k, n) for k, n in sizes.items()})
    faulty.files.update(files)
    (tmp_path / "stream.json").write_text(json.dumps(doc))
    config = parse_config({"cache_dir": "cache", "streams": {"rhcos": {"metadata": str(tmp_path / "stream.json")}},
                           "profiles": {"live": {"stream": "rhcos", "mode": "live"}},
                           "nodes": {"n0": {"profile": "live"}}}, "t.yaml", tmp_path)
    app = create_app(config)
    device = await aiohttp_client(app)
    admin = await aiohttp_client(app[ADMIN_APP])
    app[SERVICE].runtime.upstream.retry = RetryPolicy(attempts=5, initial=0.01, maximum=0.05, jitter=0.01)
    pxe = doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"]
    release = doc["architectures"]["x86_64"]["artifacts"]["metal"]["release"]

    def served(kind: str) -> str:
        return f"/artifacts/rhcos/x86_64/{release}/{pxe[kind]['location'].rsplit('/', 1)[1]}"

    assert (await (await device.get(served("kernel"))).read()) == files[pxe["kernel"]["location"][len(faulty.url):]]
    end = time.monotonic() + 20  # the last byte can go out before the file is published (fsync, rename)
    while {i["kind"]: i["status"] for i in (await app[SERVICE].readiness())[1]["artifacts"]}["kernel"] != "cached":
        assert time.monotonic() < end, "the kernel was not published"
        await asyncio.sleep(0.02)  # polling interval, bounded by the deadline
    size = len(files[pxe["rootfs"]["location"][len(faulty.url):]])
    faulty.pause[pxe["rootfs"]["location"][len(faulty.url):]] = 1_000_000
    rootfs = await device.get(served("rootfs"))
    await asyncio.wait_for(faulty.paused.wait(), 20)
    try:
        r = await admin.get("/ui/cache")
        html = await r.text()
        assert r.status == 200 and '<meta http-equiv="refresh" content="5">' in html
        assert f'<progress max="{size}" value="1000000"' in html
        assert "2.9 MiB" in html and '<span class="state state-fetching">fetching</span>' in html
        assert html.count('<span class="state state-verified">verified</span>') == 1  # the kernel
        assert '<span class="state state-missing">missing</span>' in html  # the initramfs
    finally:
        faulty.gate.set()
        await rootfs.read()


@session_loop
async def test_a_discovered_machine_appears_live_and_what_it_reports_stays_text(browser: Browser, fleet: Fleet) -> None:
    """A machine that matched no node reports itself (as the discovery script makes its iPXE do): the
    Discovered table shows it within the live update's time, its values as text (a reported
    ``<script>`` is not run), without reloading the page; its MAC reported from a second address shows
    as a conflict."""
    page = await open_page(browser, fleet.server.admin_url + "/")
    await expect(page.locator("#discovered-count")).to_have_text("0")
    await expect(page.locator("#discovered-none")).to_be_visible()
    evil = "<script>window.pwned=1</script><img src=x onerror=window.pwned=2>"
    await fleet.get(fleet.server.url + "/discover", params={"mac": "52:54:00:aa:00:01", "serial": evil,
                                                            "manufacturer": "QEMU", "product": "Standard PC",
                                                            "buildarch": "x86_64", "platform": "pcbios"})
    row = page.locator('#discovered tr[data-mac="52:54:00:aa:00:01"]')
    await expect(row).to_contain_text(evil, timeout=LIVE)
    await expect(row).to_contain_text("QEMU")
    await expect(row).to_contain_text("x86_64/pcbios")
    await expect(page.locator("#discovered-count")).to_have_text("1")
    await expect(page.locator("#discovered-none")).to_be_hidden()
    assert await page.evaluate("window.pwned") is None
    assert await page.locator("#discovered img").count() == 0
    # the same MAC reported from another address, emptier: a conflict shown live, the first facts kept
    elsewhere = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with aiohttp.ClientSession(connector=elsewhere) as other, \
            other.get(fleet.server.url + "/discover", params={"mac": "52:54:00:aa:00:01"}) as r:
        assert r.status == 200
    await expect(row).to_contain_text("127.0.0.1, 127.0.0.2 (conflict: 2 addresses claim this MAC)", timeout=LIVE)
    await expect(row).to_have_class("conflict")
    await expect(row).to_contain_text(evil)
    # a page rendered afresh shows it too, escaped by the server
    again = await open_page(browser, fleet.server.admin_url + "/")
    await expect(again.locator('#discovered tr[data-mac="52:54:00:aa:00:01"]')).to_contain_text(evil)
    await expect(again.locator('#discovered tr[data-mac="52:54:00:aa:00:01"]')).to_have_class("conflict")
    assert await again.evaluate("window.pwned") is None


@pytest.mark.parametrize("fleet", [{"server_limits": {"max_concurrent": 1, "max_queued": 0}}], indirect=True)
@session_loop
async def test_the_fleet_shows_the_requests_told_to_retry_and_the_pacing(browser: Browser, fleet: Fleet) -> None:
    """A burst of scripts at a server with one slot and no queue: the fleet page counts exactly the
    ``503`` answers the machines got (each with a ``Retry-After``) and the rate it paces them at."""
    url = (await fleet.cli("url", "m-0")).splitlines()[0]

    async def one() -> int:
        async with fleet.http.get(url) as r:
            assert r.status == 200 or (r.status == 503 and int(r.headers["Retry-After"]) >= 1)
            return r.status

    statuses = await asyncio.gather(*(one() for _ in range(40)))
    refused = statuses.count(503)
    assert refused, "40 scripts at once at one slot: some must be told to retry"
    page = await open_page(browser, fleet.server.admin_url + "/")
    line = page.locator("#admission")
    await expect(line).to_contain_text(f"{refused} told to retry since start")
    await expect(line).to_contain_text(re.compile(r"pacing at \d+ requests/s"))
