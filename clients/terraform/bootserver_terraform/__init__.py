"""The bootserver Terraform provider (source address ``bootserver/bootserver``): the resource
``bootserver_node`` and the data source ``bootserver_profile`` over the fleet API (``/api/v1``,
docs/api.md), speaking Terraform's plugin protocol 6 through the ``tf`` framework (PyPI ``tf``).

Modules: :mod:`.client` (the API over ``requests``, problem details as :class:`~.client.ApiError`),
:mod:`.schema` (the attributes: the config's node keys plus ``name``; nested attributes for the BMC
mappings; values between Terraform's and the API's forms), :mod:`.provider` (the provider, the resource,
the data source, ``main``). Install and use: docs/automation.md.
"""
