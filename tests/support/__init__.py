"""What the tests share, apart from the tests themselves: fakes and rigs (a fake upstream, the fake Equinix
Metal API, the real sushy-emulator, a throwaway PostgreSQL cluster, NetworkManager's initrd generator, the
butane stand-in, a state store that fails every call), the one config builder, signed URLs, the test
client and the ``bootserver`` subprocesses. Tests import from here, never from ``conftest`` (which only
declares fixtures)."""
