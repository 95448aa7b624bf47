"""The provider tests' fixtures: the real ``sushy-emulator`` (``emulator``) and the BMC password in the
environment (``bmc_password``), from :mod:`support.sushy_emulator`, for every test module here."""

from support.sushy_emulator import emulator_fixture, password_fixture  # noqa: F401 - fixtures: emulator, bmc_password
