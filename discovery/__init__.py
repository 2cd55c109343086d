"""Zeroconf service discovery: brokers and proxies announce themselves on the local
network (multicast DNS, DNS-SD type ``_kafka._tcp``), and clients find them.

Announce from async code::

    async with announcing(Announcement(name, port, addresses, properties)):
        ...

Find services::

    services = await discover("zeroconf:role=broker")   # or discover_blocking(...)
    producer_config = {"bootstrap.servers": services[0].bootstrap_servers}

The SDK does this by itself for ``bootstrap.servers="zeroconf"`` (or a spec such as
``"zeroconf:cluster=abc&role=broker"``); ``trafka discover`` lists what answers.
"""

from typing import TYPE_CHECKING

from trafka.common.lazy import lazy_exports

from ._service import (
    DEFAULT_TIMEOUT_MS,
    ROLES,
    SERVICE_TYPE,
    DiscoverySpec,
    KafkaService,
    instance_name,
    is_spec,
    parse_spec,
    read_service,
    sort_services,
    txt_properties,
)

# The multicast side (sockets, threads, python-zeroconf's adapter) is loaded when
# one of its names is first used: the SDK's configuration only parses specs
# (``is_spec``, ``parse_spec``), and every client imports it (issue #48).
_LAZY = {
    "Announcement": "._mdns",
    "Announcer": "._mdns",
    "DiscoveryError": "._mdns",
    "announcing": "._mdns",
    "announcing_listener": "._mdns",
    "bootstrap_list": "._mdns",
    "discover": "._mdns",
    "discover_blocking": "._mdns",
    "local_host_name": "._mdns",
    "resolve_addresses": "._mdns",
}

if TYPE_CHECKING:
    from ._mdns import (
        Announcement,
        Announcer,
        DiscoveryError,
        announcing,
        announcing_listener,
        bootstrap_list,
        discover,
        discover_blocking,
        local_host_name,
        resolve_addresses,
    )


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "ROLES",
    "SERVICE_TYPE",
    "Announcement",
    "Announcer",
    "DiscoveryError",
    "DiscoverySpec",
    "KafkaService",
    "announcing",
    "announcing_listener",
    "bootstrap_list",
    "discover",
    "discover_blocking",
    "instance_name",
    "is_spec",
    "local_host_name",
    "parse_spec",
    "read_service",
    "resolve_addresses",
    "sort_services",
    "txt_properties",
]
