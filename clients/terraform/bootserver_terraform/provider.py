"""The provider (``bootserver/bootserver``), its resource ``bootserver_node`` and data source
``bootserver_profile``, on the ``tf`` framework (PyPI ``tf``: plugin protocol 6 over gRPC).

* Create: ``PUT /api/v1/nodes/{name}`` with ``If-None-Match: *`` (a node of that name already there is
  an error naming it, never taken over: ``terraform import`` does that).
* Read (refresh, ``import``): ``GET``; a node gone means the resource is gone (the next plan creates it).
  What someone changed through the API or the CLI shows as a change in the next plan (drift).
* Update: every key but ``name`` in place, as one RFC 7396 merge patch from the state to the plan, with
  ``If-Match`` on the generation last read (a change made meanwhile fails the apply: refresh and plan again).
* Secrets: ``redfish.password`` and ``ipmi.password`` are sensitive, sent, never read back: the API says
  only whether one is set; the state keeps what was sent, and a password the node lost shows as a change.
* Errors: the API's problem details as diagnostics, one per key at fault (on that attribute).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from tf import types
from tf.iface import (
    Config,
    CreateContext,
    DataSource,
    DeleteContext,
    ImportContext,
    PlanContext,
    ReadContext,
    ReadDataContext,
    Resource,
    State,
    UpdateContext,
)
from tf.provider import Provider
from tf.runner import run_provider
from tf.schema import Attribute, Schema
from tf.utils import Diagnostics

from .client import ApiError, FleetClient
from .schema import (
    NESTED,
    PLAIN,
    PROFILE_KEYS,
    from_api,
    node_attributes,
    node_blocks,
    profile_attributes,
    replacing_patch,
    same,
    tf_name,
    to_api,
)

#: The provider's source address (``required_providers { bootserver = { source = ... } }``).
SOURCE = "registry.terraform.io/bootserver/bootserver"


def report(diags: Diagnostics, error: ApiError) -> None:
    """An API error as Terraform diagnostics: the whole line, then one per key at fault on its attribute
    (an RFC 6901 pointer into the body: ``/redfish/address`` -> ``redfish.address``)."""
    diags.add_error(error.line, "")
    for item in error.errors:
        steps: list[Any] = [s.replace("~1", "/").replace("~0", "~")
                            for s in str(item.get("pointer", "")).split("/")[1:]]
        path = [(int(s),) if s.isdigit() else s for s in steps]
        if path and isinstance(path[0], str) and (path[0] in PLAIN or path[0] in NESTED):
            path[0] = tf_name(path[0])
            diags.add_error(f"{item.get('pointer')}: {item.get('detail')}", str(item.get("detail", "")), path=path)


class BootserverProvider(Provider):
    """Provider block: ``url`` (the admin listener's base URL; ``BOOTSERVER_URL``), ``token``
    (``BOOTSERVER_TOKEN``), ``ca_path`` (a PEM CA bundle for an HTTPS listener)."""

    def __init__(self) -> None:
        self.client: FleetClient | None = None

    def get_model_prefix(self) -> str:
        return "bootserver_"

    def full_name(self) -> str:
        return SOURCE

    def get_provider_schema(self, diags: Diagnostics) -> Schema:
        return Schema(attributes=[
            Attribute("url", types.String(), "The admin listener's base URL, e.g. http://127.0.0.1:8081 "
                      "(default: BOOTSERVER_URL); the provider adds /api/v1.", optional=True),
            Attribute("token", types.String(), "An API token (default: BOOTSERVER_TOKEN).", optional=True,
                      sensitive=True),
            Attribute("ca_path", types.String(), "A PEM file of the CA of an HTTPS admin listener.", optional=True),
        ])

    def validate_config(self, diags: Diagnostics, config: Config) -> None:
        pass

    def configure_provider(self, diags: Diagnostics, config: Config) -> None:
        url = config.get("url") or os.environ.get("BOOTSERVER_URL")
        if not url:
            diags.add_error("bootserver provider: no url", "Set url in the provider block or BOOTSERVER_URL.",
                            path=["url"])
            return
        token = config.get("token") or os.environ.get("BOOTSERVER_TOKEN")
        self.client = FleetClient(url, token, config.get("ca_path"))

    def get_data_sources(self) -> list[type[DataSource]]:
        return [ProfileData]

    def get_resources(self) -> list[type[Resource]]:
        return [NodeResource]


class NodeResource(Resource):
    """``bootserver_node``: one node of the fleet (import ID: its name)."""

    def __init__(self, provider: BootserverProvider) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        return "node"

    @classmethod
    def get_schema(cls) -> Schema:
        return Schema(version=1, attributes=node_attributes(), block_types=node_blocks(),
                      description="A bootserver node (docs/config.md, nodes): created, changed in place, deleted "
                                  "through the fleet API.")

    @property
    def client(self) -> FleetClient:
        assert self.provider.client is not None, "the provider is not configured"
        return self.provider.client

    def create(self, ctx: CreateContext, planned: State) -> State | None:
        try:
            node = self.client.create_node(planned["name"], to_api(planned))
        except ApiError as e:
            report(ctx.diagnostics, e)
            return None
        return from_api(node, planned)

    def read(self, ctx: ReadContext, current: State) -> State | None:
        try:
            node = self.client.get_node(current["name"])
        except ApiError as e:
            report(ctx.diagnostics, e)
            return current
        return None if node is None else from_api(node, current)

    def plan(self, ctx: PlanContext, current: State | None, planned: State) -> State | None:
        changed = current is not None and (any(not same(k, current.get(tf_name(k)), planned.get(tf_name(k)))
                                               for k in PLAIN)
                                           or any(current.get(k) != planned.get(k) for k in NESTED))
        if changed:
            # the update's PATCH makes a new generation: Terraform must not expect the old one after apply
            planned["generation"] = types.Unknown
        return planned

    def update(self, ctx: UpdateContext, current: State, planned: State) -> State | None:
        before, after = to_api(current), to_api(planned)
        patch = replacing_patch(before, after)
        try:
            node = self.client.patch_node(planned["name"], patch, current.get("generation")) if patch else \
                self.client.get_node(planned["name"])
        except ApiError as e:
            report(ctx.diagnostics, e)
            return None
        if node is None:
            ctx.diagnostics.add_error(f"node {planned['name']} is gone", "Run terraform apply again to create it.")
            return None
        return from_api(node, planned)

    def delete(self, ctx: DeleteContext, current: State) -> None:
        try:
            self.client.delete_node(current["name"], current.get("generation"))
        except ApiError as e:
            report(ctx.diagnostics, e)

    def import_(self, ctx: ImportContext, id: str) -> State | None:
        try:
            node = self.client.get_node(id)
        except ApiError as e:
            report(ctx.diagnostics, e)
            return None
        if node is None:
            ctx.diagnostics.add_error(f"no node {id}", "terraform import takes the node's name.")
            return None
        return from_api(node, {"name": id})


class ProfileData(DataSource):
    """``bootserver_profile``: a profile of the server's config, read-only."""

    def __init__(self, provider: BootserverProvider) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        return "profile"

    @classmethod
    def get_schema(cls) -> Schema:
        return Schema(attributes=profile_attributes(), description="A profile of the bootserver's config.")

    def read(self, ctx: ReadDataContext, config: Config) -> State | None:
        if self.provider.client is None:
            ctx.diagnostics.add_error("the bootserver provider is not configured")
            return None
        try:
            profile = self.provider.client.get_profile(config["name"])
        except ApiError as e:
            report(ctx.diagnostics, e)
            return None
        state: dict[str, Any] = {"name": config["name"], "json": json.dumps(profile, sort_keys=True)}
        for key in PROFILE_KEYS:
            value = profile.get(key)
            state[key] = json.dumps(value, sort_keys=True) if isinstance(value, dict) else value
        return state


def main() -> None:
    """``terraform-provider-bootserver``: the plugin process Terraform starts (it prints the handshake line
    on stdout and serves gRPC on a unix socket until Terraform stops it)."""
    run_provider(BootserverProvider(), sys.argv)
