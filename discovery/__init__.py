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
