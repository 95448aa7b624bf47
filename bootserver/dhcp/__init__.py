"""The DHCP engine: dnsmasq (and ISC Kea's configuration) driven from the inventory (``bootserver dhcp``).

Inside the package, top to bottom: :mod:`~bootserver.dhcp.engine` (``bootserver dhcp``: writing the
files, running dnsmasq, its log into ours and onto the timeline, reloads), :mod:`~bootserver.dhcp.dnsmasq`
and :mod:`~bootserver.dhcp.kea` (each engine's configuration from the rules and the reservations),
:mod:`~bootserver.dhcp.reservations` (one per node, and ``check-config``'s checks) and
:mod:`~bootserver.dhcp.iface` (the interface's addresses), :mod:`~bootserver.dhcp.rules` (which boot file
each client gets: the one place). No DHCP or TFTP packet is ever handled in Python (docs/design.md,
"The DHCP engine"). This ``__init__`` holds no imports on purpose (docs/design.md, "Packages").
"""
