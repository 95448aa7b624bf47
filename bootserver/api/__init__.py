"""The fleet API's domain part (issue 49; docs/api.md): what ``/api/v1/`` on the admin listener answers,
without aiohttp. :mod:`~bootserver.api.problems` (RFC 9457 problem kinds), :mod:`~bootserver.api.models`
(the pydantic models of every body and answer), :mod:`~bootserver.api.operations` (each operation declared
once: method, path, scope, what it resolves, its models and problems) and :mod:`~bootserver.api.openapi`
(the OpenAPI 3.1 document generated from those). The aiohttp side is :mod:`bootserver.http.api`.
"""
