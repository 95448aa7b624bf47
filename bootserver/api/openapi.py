"""The fleet API's OpenAPI 3.1 document (``GET /api/v1/openapi.json``), written from the operations'
declarations (:data:`bootserver.api.operations.OPERATIONS`) and the pydantic models the server validates
with (:mod:`bootserver.api.models`): pydantic v2 emits JSON Schema 2020-12, which OpenAPI 3.1 uses as it
is (OpenAPI Specification 3.1.0, section 4.8.24). Checked by ``openapi-spec-validator`` in the tests.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from . import models
from .operations import ACTIONS, COMMON_PROBLEMS, JSON, OPERATIONS, Operation
from .problems import KINDS, MEDIA_TYPE

#: Where a model's schema lives in the document.
REF = "#/components/schemas/{model}"

DESCRIPTION = """The fleet API of bootserver (docs/api.md): nodes, profiles, discovered machines, a node's
history. JSON only; every error is RFC 9457 problem details (`application/problem+json`) with a stable
`type` per kind. Authenticate with `Authorization: Bearer <token>` (`bootserver tokens create`, or the
admin listener's `server.admin.token_file`)."""


def _models() -> list[type[BaseModel]]:
    seen: dict[str, type[BaseModel]] = {"ProblemModel": models.ProblemModel}
    for op in OPERATIONS:
        for m in (op.body, *op.answers.values()):
            if m is not None:
                seen.setdefault(m.__name__, m)
    return list(seen.values())


def _not_null(prop: dict[str, Any]) -> dict[str, Any]:
    """A query parameter's schema without pydantic's ``null`` alternative (a query has no null: the
    parameter is left out) and without a ``null`` default."""
    alts = prop.get("anyOf")
    if alts is not None:
        rest = [a for a in alts if a != {"type": "null"}]
        if len(rest) == 1:
            prop = {**{k: v for k, v in prop.items() if k != "anyOf"}, **rest[0]}
    if prop.get("default", 0) is None:
        prop = {k: v for k, v in prop.items() if k != "default"}
    return prop


def _parameters(op: Operation) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    if "{action}" in op.path:
        params.append({"name": "action", "in": "path", "required": True,
                       "schema": {"type": "string", "enum": list(ACTIONS)}})
    for segment in ("name", "mac"):
        if "{" + segment + "}" in op.path:
            schema = ({"type": "string", "pattern": r"^[0-9A-Fa-f]{2}([:-][0-9A-Fa-f]{2}){5}$"} if segment == "mac"
                      else models.NodeView.model_json_schema()["properties"]["name"] | {"readOnly": False})
            schema.pop("readOnly", None)
            schema.pop("description", None)
            schema.pop("title", None)
            params.append({"name": segment, "in": "path", "required": True, "schema": schema})
    if op.query is not None:
        schema = op.query.model_json_schema()
        required = set(schema.get("required", ()))
        for key, prop in schema["properties"].items():
            prop = _not_null({k: v for k, v in prop.items() if k != "title"})
            params.append({"name": key, "in": "query", "required": key in required, "schema": prop,
                           **({"description": prop["description"]} if "description" in prop else {})})
    for name, (description, schema) in op.request_headers.items():
        params.append({"name": name, "in": "header", "required": False, "description": description,
                       "schema": dict(schema)})
    return params


def _problem_answers(op: Operation) -> dict[str, Any]:
    kinds = (*(() if op.open else COMMON_PROBLEMS), *op.problems)
    out: dict[str, Any] = {}
    for status in sorted({KINDS[k].status for k in kinds}):
        named = [KINDS[k] for k in kinds if KINDS[k].status == status]
        answer: dict[str, Any] = {
            "description": "; ".join(f"`{k.type}`: {k.title}" for k in named),
            "content": {MEDIA_TYPE: {"schema": {"$ref": REF.format(model="Problem")}}}}
        if status == 401:
            answer["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}}}
        out[str(status)] = answer
    return out


def _operation(op: Operation, names: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": op.name, "summary": op.summary, "tags": [op.path.split("/")[1]]}
    params = _parameters(op)
    if params:
        out["parameters"] = params
    if op.body is not None:
        ref = {"$ref": REF.format(model=names[op.body.__name__])}
        out["requestBody"] = {"required": True, "content": {m: {"schema": ref} for m in op.media}}
    answers: dict[str, Any] = {}
    for status, model in op.answers.items():
        answer: dict[str, Any] = {"description": op.summary}
        if model is not None:
            answer["content"] = {JSON: {"schema": {"$ref": REF.format(model=names[model.__name__])}}}
        elif op.name == "getOpenapi":
            answer["content"] = {JSON: {"schema": {"type": "object"}}}
        elif op.stream:
            answer["content"] = {"text/event-stream": {"schema": {"type": "string"}}}
        if op.headers and status < 300:
            answer["headers"] = {h: {"description": d, "schema": {"type": "string"}} for h, d in op.headers.items()}
        if status in op.links:
            answer["links"] = {key: {"operationId": link.operation, "parameters": dict(link.parameters),
                                     **({"description": link.description} if link.description else {})}
                               for key, link in op.links[status].items()}
        answers[str(status)] = answer
    out["responses"] = answers | _problem_answers(op)
    out["security"] = [] if op.open else [{"bearer": [op.scope]}]
    return out


@cache
def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document (a fresh dict each call would cost ~50 ms: it is built once; callers must
    not change it)."""
    modes: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (m, "validation" if any(op.body is m for op in OPERATIONS) else "serialization") for m in _models()]
    keys, schema = models_json_schema(modes, ref_template=REF)
    defs: dict[str, Any] = schema.get("$defs", {})
    names = {m.__name__: keys[(m, mode)]["$ref"].rsplit("/", 1)[1] for m, mode in modes}
    problem = defs[names["ProblemModel"]]
    problem["properties"]["type"]["enum"] = sorted(k.type for k in KINDS.values())
    if names["ProblemModel"] != "Problem":
        defs["Problem"] = defs.pop(names["ProblemModel"])
        names["ProblemModel"] = "Problem"
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.full_path, {})[op.method.lower()] = _operation(op, names)
    return {
        "openapi": "3.1.0",
        "info": {"title": "bootserver fleet API", "version": "1", "description": DESCRIPTION,
                 "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"}},
        "paths": paths,
        "components": {"schemas": defs,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                                      "description": "a token of `bootserver tokens create` "
                                                                     "or server.admin.token_file's"}}},
        "x-problem-types": {k.type: {"status": k.status, "title": k.title} for k in KINDS.values()},
    }


@cache
def document_bytes() -> bytes:
    """:func:`document` as UTF-8 JSON, as ``GET /api/v1/openapi.json`` sends it."""
    return json.dumps(document(), indent=1).encode()
