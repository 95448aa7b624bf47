"""The Equinix Metal client against the local fake API (real HTTP on 127.0.0.1)."""

from __future__ import annotations

import logging
import socket

import pytest
import requests
from support.fake_metal import (  # noqa: F401 - the fake_metal fixture
    PROJECT,
    TOKEN,
    create_body_errors,
    fake_metal_fixture,
    update_body_errors,
)

import bootserver
from bootserver.errors import InputError
from bootserver.providers.base import ProviderError as MetalError
from bootserver.providers.base import ProviderNotFound as MetalNotFound
from bootserver.providers.equinix import Equinix
from bootserver.providers.equinix_api import (
    DeviceSpec,
    EquinixMetal,
    MissingTokenError,
    _asked_wait,
    device_create_body,
)
from bootserver.providers.interface import provider_class

URL = "http://boot.example:8080/ipxe/master-0?sig=abc"


def client(fake, **kwargs) -> EquinixMetal:
    kwargs.setdefault("backoff_factor", 0)
    kwargs.setdefault("timeout", (5, 10))
    return EquinixMetal(fake.token, fake.url, **kwargs)


def spec(**kw) -> DeviceSpec:
    kw.setdefault("hostname", "master-0")
    kw.setdefault("plan", "c3.small.x86")
    if "facility" not in kw:
        kw.setdefault("metro", "da")
    if "userdata" not in kw:
        kw.setdefault("ipxe_script_url", URL)
    kw.setdefault("tags", ("bootserver",))
    return DeviceSpec(**kw)


def test_equinix_is_the_registered_provider():
    assert provider_class("equinix") is Equinix
    assert Equinix.platform_id == "packet"


def test_update_re_points_a_device_with_a_valid_body(fake_metal):
    userdata = f"#!ipxe\nchain --autofree {URL}\n"
    with client(fake_metal) as api:
        device = api.create(PROJECT, spec())
        assert device.ipxe_script_url == URL
        device = api.update(device.id, userdata=userdata)
    assert (device.ipxe_script_url, device.userdata) == (None, userdata)
    [call] = fake_metal.calls("PUT")
    assert call.path == f"/devices/{device.id}"
    assert call.body == {"ipxe_script_url": "", "userdata": userdata}
    assert fake_metal.invalid_bodies == []
    assert update_body_errors({"ipxe_url": URL})  # a typo the spec alone would let through
    assert update_body_errors({"userdata": 1})


def test_create_sends_a_valid_metro_body_with_auth_and_user_agent(fake_metal):
    with client(fake_metal) as api:
        device = api.create(
            PROJECT,
            spec(
                billing_cycle="hourly",
                always_pxe=True,
                spot_instance=True,
                spot_price_max=0.5,
                hardware_reservation_id="next-available",
                project_ssh_keys=("5d8c0c3e-1a2b-4c5d-8e9f-0a1b2c3d4e5f",),
                customdata={"cluster": "ocp"},
                tags=("bootserver", "role:master"),
            ),
        )
    assert device.state == "queued"
    assert device.hostname == "master-0"
    assert device.tags == ("bootserver", "role:master")
    assert {a.address for a in device.ip_addresses} == {"147.75.0.10", "2604:1380::a", "10.70.0.10"}
    [call] = fake_metal.calls("POST")
    assert call.path == f"/projects/{PROJECT}/devices"
    assert fake_metal.invalid_bodies == []
    assert call.body == {
        "hostname": "master-0",
        "plan": "c3.small.x86",
        "metro": "da",
        "operating_system": "custom_ipxe",
        "ipxe_script_url": URL,
        "billing_cycle": "hourly",
        "tags": ["bootserver", "role:master"],
        "always_pxe": True,
        "spot_instance": True,
        "spot_price_max": 0.5,
        "hardware_reservation_id": "next-available",
        "project_ssh_keys": ["5d8c0c3e-1a2b-4c5d-8e9f-0a1b2c3d4e5f"],
        "customdata": {"cluster": "ocp"},
    }
    assert call.headers["X-Auth-Token"] == TOKEN
    assert call.headers["User-Agent"].startswith(f"bootserver/{bootserver.__version__} ")


def test_create_in_facility_with_userdata_is_valid(fake_metal):
    userdata = f"#!ipxe\nchain --autofree {URL}\n"
    with client(fake_metal) as api:
        api.create(PROJECT, spec(facility=("da11", "any"), userdata=userdata))
    [call] = fake_metal.calls("POST")
    assert fake_metal.invalid_bodies == []
    assert call.body["facility"] == ["da11", "any"]
    assert "metro" not in call.body
    assert call.body["userdata"] == userdata
    assert "ipxe_script_url" not in call.body


def test_fake_rejects_what_the_spec_rejects():
    good = device_create_body(spec())
    assert create_body_errors(good) == []
    assert create_body_errors({**good, "facility": "da11"})  # metro and facility: both oneOf branches
    assert create_body_errors({k: v for k, v in good.items() if k != "plan"})
    assert create_body_errors({k: v for k, v in good.items() if k != "metro"})
    assert create_body_errors({**good, "billing_cycle": "weekly"})
    assert create_body_errors({**good, "project_ssh_keys": ["not-a-uuid"]})
    assert create_body_errors({**good, "ipxe_url": URL})  # a typo the spec alone would let through


def test_api_422_is_shown_with_status_and_the_errors_list(fake_metal):
    with client(fake_metal) as api, pytest.raises(MetalError) as info:
        api._request("POST", f"/projects/{PROJECT}/devices", json={"hostname": "x"}, expect=(201,))
    err = info.value
    assert err.status == 422
    assert err.exit_code == 1
    assert str(err).startswith(f"Equinix Metal API: POST /projects/{PROJECT}/devices: 422 Unprocessable Entity: ")
    assert "is not valid under any of the given schemas" in str(err)


def test_wrong_token_is_401_with_the_api_message_and_no_token(fake_metal):
    api = EquinixMetal("wrong-secret-token", fake_metal.url, backoff_factor=0)
    with pytest.raises(MetalError) as info:
        api.list(PROJECT)
    assert info.value.status == 401
    assert "401 Unauthorized: Invalid authentication token (check METAL_AUTH_TOKEN)" in str(info.value)
    assert "wrong-secret-token" not in str(info.value)
    assert "wrong-secret-token" not in repr(api)


def test_get_and_delete_unknown_device_are_not_found(fake_metal):
    with client(fake_metal) as api:
        with pytest.raises(MetalNotFound, match="404 Not Found: Not found"):
            api.get("6f1c8a4e-0000-4000-8000-000000000000")
        with pytest.raises(MetalNotFound):
            api.delete("6f1c8a4e-0000-4000-8000-000000000000")


def test_delete_is_204_and_the_device_is_gone(fake_metal):
    device_id = fake_metal.add_device("w-0", ["bootserver"])
    with client(fake_metal) as api:
        api.delete(device_id)
        with pytest.raises(MetalNotFound):
            api.get(device_id)
    assert [c.path for c in fake_metal.calls("DELETE")] == [f"/devices/{device_id}"]


def test_device_goes_queued_provisioning_active(fake_metal):
    with client(fake_metal) as api:
        device = api.create(PROJECT, spec())
        states = [api.get(device.id).state for _ in range(3)]
    assert states == ["queued", "provisioning", "active"]


def test_list_follows_pagination_and_keeps_only_our_tag(fake_metal):
    ours = {fake_metal.add_device(f"n-{i}", ["bootserver", "x"]) for i in range(23)}
    fake_metal.add_device("other", ["someone-else"])
    with client(fake_metal, per_page=10) as api:
        devices = api.list(PROJECT, tag="bootserver")
    assert {d.id for d in devices} == ours
    pages = [(c.query["page"], c.query["per_page"], c.query["tag"]) for c in fake_metal.calls("GET", "/projects/")]
    assert pages == [("1", "10", "bootserver"), ("2", "10", "bootserver"), ("3", "10", "bootserver")]


def test_429_is_retried_after_retry_after(fake_metal):
    waits = []
    fake_metal.inject("GET", "/projects/", 429, headers={"Retry-After": "3"})
    with client(fake_metal, retry_sleep=waits.append) as api:
        assert api.list(PROJECT) == []
    assert waits == [3.0]
    assert len(fake_metal.calls("GET")) == 2


def test_429_is_retried_after_x_ratelimit_reset(fake_metal):
    waits = []
    fake_metal.inject("POST", "/projects/", 429, headers={"X-RateLimit-Reset": "2"})
    with client(fake_metal, retry_sleep=waits.append) as api:
        api.create(PROJECT, spec())
    assert waits == [2.0]
    assert len(fake_metal.calls("POST")) == 2
    assert len(fake_metal.devices) == 1


def test_429_for_too_long_gives_the_api_error(fake_metal):
    waits = []
    fake_metal.inject("GET", "/devices/", 429, body={"errors": ["slow down"]}, headers={"Retry-After": "1"}, times=10)
    with client(fake_metal, retries=2, retry_sleep=waits.append) as api, pytest.raises(MetalError) as info:
        api.get("6f1c8a4e-0000-4000-8000-000000000000")
    assert info.value.status == 429
    assert "429 Too Many Requests: slow down" in str(info.value)
    assert waits == [1.0, 1.0]
    assert len(fake_metal.calls("GET")) == 3


def test_5xx_on_get_is_retried_with_exponential_backoff(fake_metal):
    waits = []
    fake_metal.inject("GET", "/projects/", 503, times=3)
    with client(fake_metal, backoff_factor=0.5, retry_sleep=waits.append) as api:
        assert api.list(PROJECT) == []
    assert len(fake_metal.calls("GET")) == 4
    assert waits == [0.5, 1.0, 2.0]


def test_5xx_on_create_is_not_retried(fake_metal):
    fake_metal.inject("POST", "/projects/", 500, body={"error": "boom"})
    with client(fake_metal) as api, pytest.raises(MetalError, match="500 Internal Server Error: boom"):
        api.create(PROJECT, spec())
    assert len(fake_metal.calls("POST")) == 1


def test_every_call_has_a_timeout(fake_metal):
    fake_metal.delay = 1.0
    with client(fake_metal, timeout=(5, 0.2)) as api, pytest.raises(MetalError, match="ReadTimeout"):
        api.list(PROJECT)


def test_connection_refused_is_a_runtime_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    api = EquinixMetal("secret-xyz", f"http://127.0.0.1:{port}/metal/v1", retries=1, backoff_factor=0)
    with pytest.raises(MetalError, match="ConnectionError") as info:
        api.get("x")
    assert info.value.exit_code == 1
    assert "secret-xyz" not in str(info.value)


def answer(status: int, headers: dict[str, str]) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response.headers.update(headers)
    return response


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"X-RateLimit-Reset": "4"}, 4.0),
        ({"Retry-After": "2", "X-RateLimit-Reset": "9"}, 2.0),
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # an HTTP date in the past
        ({"X-RateLimit-Reset": "garbage"}, None),
        ({}, None),
    ],
)
def test_retry_after_sources(headers, expected):
    assert _asked_wait(answer(429, headers)) == expected


def test_x_ratelimit_reset_as_unix_time():
    import time

    waited = _asked_wait(answer(429, {"X-RateLimit-Reset": str(int(time.time()) + 30)}))
    assert 25 <= waited <= 31


def test_server_asked_waits_are_capped(fake_metal):
    waits = []
    fake_metal.inject("GET", "/projects/", 429, headers={"Retry-After": "100000"})
    with client(fake_metal, retry_sleep=waits.append, max_retry_after=120) as api:
        api.list(PROJECT)
    assert waits == [120.0]


def test_missing_token_is_exit_2_naming_the_variable():
    with pytest.raises(MissingTokenError) as info:
        EquinixMetal.from_env(environ={})
    assert isinstance(info.value, InputError)
    assert info.value.exit_code == 2
    assert "METAL_AUTH_TOKEN" in str(info.value)


def test_api_url_env_wins_over_config_key():
    env = {"METAL_AUTH_TOKEN": "t", "METAL_API_URL": "http://127.0.0.1:1/metal/v1"}
    assert EquinixMetal.from_env("http://config.example/v1", environ=env).api_url == "http://127.0.0.1:1/metal/v1"
    env = {"METAL_AUTH_TOKEN": "t"}
    assert EquinixMetal.from_env("http://config.example/v1", environ=env).api_url == "http://config.example/v1"
    assert EquinixMetal.from_env(environ=env).api_url == "https://api.equinix.com/metal/v1"


def test_token_never_appears_in_logs_or_errors(fake_metal, caplog):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="urllib3")
    caplog.set_level(logging.DEBUG, logger="bootserver")
    messages = []
    with client(fake_metal) as api:
        fake_metal.inject("GET", "/projects/", 429, headers={"Retry-After": "0"})
        device = api.create(PROJECT, spec())
        api.list(PROJECT)
        api.get(device.id)
        fake_metal.inject("GET", "/devices/", 500, times=10)
        for call in (
            lambda: api.get(device.id),
            lambda: api._request("POST", f"/projects/{PROJECT}/devices", json={"hostname": "x"}),
        ):
            try:
                call()
            except MetalError as exc:
                messages.append(str(exc))
    bad = EquinixMetal(TOKEN + "-wrong", fake_metal.url)
    try:
        bad.get(device.id)
    except MetalError as exc:
        messages.append(str(exc))
    assert len(messages) == 3
    assert caplog.text  # urllib3 and bootserver did log
    for text in [caplog.text, *messages, repr(api), repr(bad)]:
        assert TOKEN not in text

