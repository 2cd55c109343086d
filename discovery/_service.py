"""Kafka services on DNS-SD ("zeroconf"): what an announcement carries, and how a
client reads, filters and orders what it finds. No sockets, no threads, no clocks.

Rules of the announcement (one DNS-SD instance per listener):

* The service type is ``_kafka._tcp.local.``. The instance name is free text
  (DNS-SD allows any UTF-8 up to 63 bytes); trafka uses
  ``"<role> <node> on <host>:<port>"`` so that names are unique per listener.
* The SRV record holds the listener's port; the A/AAAA records hold the address
  the listener *advertises* (the one its Metadata answers name), never a
  wildcard, so that a client bootstrapping from the announcement is sent on to the
  same addresses by Metadata.
* The TXT record holds ``key=value`` strings, all optional to a reader: a service
  announced by another program, with none of them, is still listed. Keys:
  ``txtvers`` (``1``), ``role`` (``broker`` or ``proxy``), ``cluster_id``,
  ``node_id``, ``security_protocol`` (Kafka's spelling, ``PLAINTEXT`` when
  absent), ``sasl_mechanisms`` (comma-separated), ``host`` (the announcing
  machine's host name) and ``version`` (the announcing trafka's).
* A loopback address is reachable only from the machine that announced it.
  A reader keeps loopback addresses only when the ``host`` key names its own host
  name; a service left with no address is dropped.
* Discovery specs in ``bootstrap.servers`` are ``zeroconf`` or
  ``zeroconf:key=value&key=value`` with the keys ``cluster``, ``role``, ``name``
  and ``timeout_ms``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "ROLES",
    "SERVICE_TYPE",
    "DiscoverySpec",
    "KafkaService",
    "instance_name",
    "is_spec",
    "parse_spec",
    "read_service",
    "sort_services",
    "txt_properties",
]

SERVICE_TYPE = "_kafka._tcp.local."
ROLES = ("broker", "proxy")
DEFAULT_TIMEOUT_MS = 3_000
TXT_VERSION = "1"
_SPEC_PREFIX = "zeroconf"
_SPEC_KEYS = ("cluster", "role", "name", "timeout_ms")
_MAX_LABEL = 63  # bytes of a DNS label, the instance name's limit
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclasses.dataclass(frozen=True, slots=True)
class KafkaService:
    """A Kafka listener found on the network.

    Attributes:
        name: the DNS-SD instance name (without the service type).
        port: the listener's port.
        addresses: the addresses to connect to, in the announcer's order.
        role: ``"broker"``, ``"proxy"``, or None when the announcer did not say.
        cluster_id: the Kafka cluster id, when announced.
        node_id: the broker's node id, when announced.
        security_protocol: the listener's (``PLAINTEXT`` when not announced).
        sasl_mechanisms: the SASL mechanisms offered, when announced.
        host: the announcing machine's host name, when announced.
        version: the announcing trafka's version, when announced.
        properties: every TXT entry, decoded as UTF-8.
    """

    name: str
    port: int
    addresses: tuple[str, ...]
    role: str | None = None
    cluster_id: str | None = None
    node_id: int | None = None
    security_protocol: str = "PLAINTEXT"
    sasl_mechanisms: tuple[str, ...] = ()
    host: str | None = None
    version: str | None = None
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for each address, comma-separated (IPv6 in brackets)."""
        return ",".join(_host_port(a, self.port) for a in self.addresses)

    @property
    def endpoints(self) -> list[tuple[str, int]]:
        """``(address, port)`` for each address."""
        return [(a, self.port) for a in self.addresses]


@dataclasses.dataclass(frozen=True, slots=True)
class DiscoverySpec:
    """Which services a discovery looks for, and how long it waits.

    Attributes:
        cluster_id: only services announcing this cluster id.
        role: only ``broker`` or only ``proxy`` services.
        name: only the service with this instance name.
        timeout_ms: how long to look before giving up.
    """

    cluster_id: str | None = None
    role: str | None = None
    name: str | None = None
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    def __post_init__(self) -> None:
        if self.role is not None and self.role not in ROLES:
            raise ValueError(f"zeroconf role must be one of {', '.join(ROLES)}, got {self.role!r}")
        if self.timeout_ms <= 0:
            raise ValueError(f"zeroconf timeout_ms must be positive, got {self.timeout_ms}")

    def matches(
        self, service: KafkaService, security_protocols: str | Sequence[str] | None = None
    ) -> bool:
        """True when ``service`` passes the filters and, if ``security_protocols``
        is given, speaks one of them (a service that announces none passes)."""
        if self.cluster_id is not None and service.cluster_id != self.cluster_id:
            return False
        if self.role is not None and service.role != self.role:
            return False
        if self.name is not None and service.name != self.name:
            return False
        if security_protocols is None or "security_protocol" not in service.properties:
            return True
        if isinstance(security_protocols, str):
            security_protocols = (security_protocols,)
        return service.security_protocol in {p.upper() for p in security_protocols}

    def describe(self) -> str:
        """The filters in words, for error messages (``"cluster abc, role broker"``)."""
        parts = [
            f"{label} {value}"
            for label, value in (
                ("cluster", self.cluster_id),
                ("role", self.role),
                ("name", self.name),
            )
            if value is not None
        ]
        return ", ".join(parts) or "no filter"


def is_spec(server: str) -> bool:
    """True when a ``bootstrap.servers`` entry asks for discovery."""
    text = server.strip().lower()
    return text == _SPEC_PREFIX or text.startswith(_SPEC_PREFIX + ":")


def parse_spec(server: str) -> DiscoverySpec:
    """Parse ``zeroconf`` or ``zeroconf:cluster=abc&role=broker&timeout_ms=5000``.

    Raises:
        ValueError: not a discovery spec, an unknown key, a repeated key or a bad value.
    """
    text = server.strip()
    if not is_spec(text):
        raise ValueError(f"{server!r} is not a zeroconf discovery spec")
    rest = text[len(_SPEC_PREFIX) :].removeprefix(":")
    values: dict[str, str] = {}
    for item in rest.split("&") if rest else ():
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or not key or not value.strip():
            raise ValueError(f"{server!r}: {item!r} is not key=value")
        if key not in _SPEC_KEYS:
            raise ValueError(f"{server!r}: unknown key {key!r}; known: {', '.join(_SPEC_KEYS)}")
        if key in values:
            raise ValueError(f"{server!r}: {key!r} given twice")
        values[key] = value.strip()
    timeout = values.get("timeout_ms", str(DEFAULT_TIMEOUT_MS))
    if not timeout.isdigit():
        raise ValueError(f"{server!r}: timeout_ms must be a whole number of milliseconds")
    return DiscoverySpec(
        cluster_id=values.get("cluster"),
        role=values.get("role", "").lower() or None,
        name=values.get("name"),
        timeout_ms=int(timeout),
    )


def txt_properties(
    *,
    role: str,
    host: str,
    cluster_id: str | None = None,
    node_id: int | None = None,
    security_protocol: str | None = "PLAINTEXT",
    sasl_mechanisms: Sequence[str] = (),
    version: str | None = None,
) -> dict[str, str]:
    """The TXT entries announcing a listener (absent values are left out).

    ``security_protocol=None`` leaves the protocol unannounced (a proxy cannot know
    whether the brokers behind it ask for SASL).

    Raises:
        ValueError: an unknown role or security protocol.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if security_protocol is not None and security_protocol.upper() not in _SECURITY_PROTOCOLS:
        raise ValueError(f"unknown security protocol {security_protocol!r}")
    props = {"txtvers": TXT_VERSION, "role": role, "host": host}
    if cluster_id is not None:
        props["cluster_id"] = cluster_id
    if node_id is not None:
        props["node_id"] = str(node_id)
    if security_protocol is not None:
        props["security_protocol"] = security_protocol.upper()
    if sasl_mechanisms:
        props["sasl_mechanisms"] = ",".join(sasl_mechanisms)
    if version is not None:
        props["version"] = version
    return props


def instance_name(role: str, node_id: int | None, host: str, port: int) -> str:
    """A DNS-SD instance name unique per listener, cut to the 63-byte label limit
    (on a character boundary, keeping the port)."""
    who = "brokerlite" if role == "broker" else "trafka proxy"
    if node_id is not None:
        who += f" {node_id}"
    suffix = f":{port}"
    head = f"{who} on {host}"
    budget = _MAX_LABEL - len(suffix.encode())
    while len(head.encode()) > budget:
        head = head[:-1]
    return head + suffix


def read_service(
    name: str,
    port: int,
    addresses: Iterable[str],
    properties: Mapping[bytes, bytes | None] | Mapping[str, str | None],
    *,
    local_host: str,
) -> KafkaService | None:
    """A :class:`KafkaService` from a resolved DNS-SD instance, or None when it
    leaves nothing to connect to (no port, or no address usable from here).

    Args:
        name: the full or bare instance name (the service type is stripped).
        port: the SRV port.
        addresses: the A/AAAA addresses, as text.
        properties: the TXT entries as the mDNS library gives them (bytes or text;
            a key without ``=`` has the value None).
        local_host: this machine's host name, to decide whether loopback
            addresses are usable.
    """
    if not 0 < port < 65536:
        return None
    props: dict[str, str] = {}
    for raw_key, raw_value in properties.items():
        key = _text(raw_key).strip().lower()
        if key:
            props[key] = "" if raw_value is None else _text(raw_value)
    host = props.get("host") or None
    same_host = host is not None and host.lower() == local_host.lower()
    usable: list[str] = []
    for text in addresses:
        try:
            address = ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError:
            continue
        if address.is_unspecified or (address.is_loopback and not same_host):
            continue
        if text not in usable:
            usable.append(text)
    if not usable:
        return None
    role = props.get("role", "").lower()
    node = props.get("node_id", "")
    protocol = props.get("security_protocol", "PLAINTEXT").upper()
    mechanisms = tuple(m.strip() for m in props.get("sasl_mechanisms", "").split(",") if m.strip())
    bare = name[: -len(SERVICE_TYPE) - 1] if name.endswith("." + SERVICE_TYPE) else name
    return KafkaService(
        name=bare,
        port=port,
        addresses=tuple(usable),
        role=role if role in ROLES else None,
        cluster_id=props.get("cluster_id") or None,
        node_id=int(node) if node.isdigit() else None,
        security_protocol=protocol if protocol in _SECURITY_PROTOCOLS else "PLAINTEXT",
        sasl_mechanisms=mechanisms,
        host=host,
        version=props.get("version") or None,
        properties=props,
    )


def sort_services(services: Iterable[KafkaService]) -> list[KafkaService]:
    """Services in a stable order: brokers before proxies before unknown roles,
    then by cluster, node id and name."""
    rank = {"broker": 0, "proxy": 1}
    return sorted(
        services,
        key=lambda s: (
            rank.get(s.role or "", 2),
            s.cluster_id or "",
            -1 if s.node_id is None else s.node_id,
            s.name,
        ),
    )


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _host_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
