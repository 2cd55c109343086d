"""The sans-IO rules of zeroconf discovery: specs, TXT entries, what a reader
keeps of an announcement, and the SDK's acceptance of discovery specs."""

from __future__ import annotations

import pytest

from trafka.discovery import (
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
from trafka.sdk import ProducerConfig
from trafka.sdk.errors import ConfigError


def test_discovery_specs_parse_with_their_filters() -> None:
    assert parse_spec("zeroconf") == DiscoverySpec()
    assert parse_spec(" ZeroConf: ") == DiscoverySpec()
    spec = parse_spec("zeroconf:cluster=abc-1&role=Broker&name=b 1&timeout_ms=250")
    assert spec == DiscoverySpec(cluster_id="abc-1", role="broker", name="b 1", timeout_ms=250)
    assert spec.describe() == "cluster abc-1, role broker, name b 1"
    assert DiscoverySpec().describe() == "no filter"
    assert [is_spec(s) for s in ("zeroconf", "zeroconf:role=proxy", "zeroconfx:1", "h:9092")] == [
        True,
        True,
        False,
        False,
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("zeroconf:clusters=a", "unknown key 'clusters'"),
        ("zeroconf:cluster=a&cluster=b", "'cluster' given twice"),
        ("zeroconf:role=leader", "role must be one of broker, proxy"),
        ("zeroconf:timeout_ms=soon", "whole number of milliseconds"),
        ("zeroconf:timeout_ms=0", "must be positive"),
        ("zeroconf:cluster", "is not key=value"),
        ("zeroconf:cluster=", "is not key=value"),
        ("localhost:9092", "not a zeroconf discovery spec"),
    ],
)
def test_malformed_specs_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_spec(text)


def test_txt_entries_read_back_as_the_mdns_library_hands_them_over() -> None:
    props = txt_properties(
        role="broker",
        host="laptop",
        cluster_id="c-9",
        node_id=4,
        security_protocol="sasl_ssl",
        sasl_mechanisms=("PLAIN", "SCRAM-SHA-512"),
        version="1.2.3",
    )
    wire = {k.encode(): v.encode() for k, v in props.items()}
    service = read_service(
        f"brokerlite 4 on laptop:9093.{SERVICE_TYPE}",
        9093,
        ["192.0.2.7", "2001:db8::7"],
        wire,
        local_host="elsewhere",
    )
    assert service == KafkaService(
        name="brokerlite 4 on laptop:9093",
        port=9093,
        addresses=("192.0.2.7", "2001:db8::7"),
        role="broker",
        cluster_id="c-9",
        node_id=4,
        security_protocol="SASL_SSL",
        sasl_mechanisms=("PLAIN", "SCRAM-SHA-512"),
        host="laptop",
        version="1.2.3",
        properties=props,
    )
    assert service.bootstrap_servers == "192.0.2.7:9093,[2001:db8::7]:9093"
    assert service.endpoints == [("192.0.2.7", 9093), ("2001:db8::7", 9093)]


def test_txt_properties_leave_out_what_is_unknown_and_refuse_nonsense() -> None:
    props = txt_properties(role="proxy", host="h", security_protocol=None)
    assert props == {"txtvers": "1", "role": "proxy", "host": "h"}
    with pytest.raises(ValueError, match="role"):
        txt_properties(role="controller", host="h")
    with pytest.raises(ValueError, match="security protocol"):
        txt_properties(role="broker", host="h", security_protocol="TLS")


def test_loopback_addresses_are_kept_only_on_the_announcing_host() -> None:
    props = {b"host": b"Laptop", b"role": b"broker"}
    here = read_service("b", 9092, ["127.0.0.1", "::1"], props, local_host="laptop")
    assert here is not None and here.addresses == ("127.0.0.1", "::1")
    # From another machine the same announcement has nothing to connect to.
    assert read_service("b", 9092, ["127.0.0.1", "::1"], props, local_host="other") is None
    mixed = read_service("b", 9092, ["127.0.0.1", "192.0.2.1"], props, local_host="other")
    assert mixed is not None and mixed.addresses == ("192.0.2.1",)
    # No host key: a loopback address cannot be trusted to be ours.
    assert read_service("b", 9092, ["127.0.0.1"], {}, local_host="laptop") is None


def test_foreign_and_garbled_announcements_are_read_without_failing() -> None:
    # Another program's Kafka: no TXT at all, a duplicate and junk addresses.
    bare = read_service(
        "kafka-0", 9092, ["198.51.100.4", "198.51.100.4", "0.0.0.0", "nonsense"], {}, local_host="x"
    )
    assert bare == KafkaService(name="kafka-0", port=9092, addresses=("198.51.100.4",))
    assert bare.security_protocol == "PLAINTEXT" and bare.role is None
    garbled = read_service(
        "g",
        9092,
        ["198.51.100.5"],
        {
            b"role": b"controller",
            b"node_id": b"-3",
            b"security_protocol": b"QUIC",
            b"cluster_id": b"\xff\xfe",
            b"flag": None,
            b"": b"empty key",
        },
        local_host="x",
    )
    assert garbled is not None
    assert (garbled.role, garbled.node_id, garbled.security_protocol) == (None, None, "PLAINTEXT")
    assert garbled.cluster_id == "\ufffd\ufffd"
    assert garbled.properties["flag"] == "" and "" not in garbled.properties
    assert read_service("p0", 0, ["198.51.100.5"], {}, local_host="x") is None
    assert read_service("p", 70000, ["198.51.100.5"], {}, local_host="x") is None


def test_filters_match_cluster_role_name_and_security() -> None:
    plain = KafkaService(
        "a", 1, ("192.0.2.1",), role="broker", cluster_id="c1",
        properties={"security_protocol": "PLAINTEXT"},
    )  # fmt: skip
    tls = KafkaService(
        "b", 2, ("192.0.2.1",), role="broker", cluster_id="c1", security_protocol="SSL",
        properties={"security_protocol": "SSL"},
    )  # fmt: skip
    silent = KafkaService("c", 3, ("192.0.2.1",), role="proxy")
    assert DiscoverySpec(cluster_id="c1").matches(plain)
    assert not DiscoverySpec(cluster_id="c2").matches(plain)
    assert not DiscoverySpec(cluster_id="c1").matches(silent)
    assert DiscoverySpec(role="proxy").matches(silent)
    assert not DiscoverySpec(role="proxy").matches(plain)
    assert DiscoverySpec(name="b").matches(tls) and not DiscoverySpec(name="b").matches(plain)
    spec = DiscoverySpec()
    assert spec.matches(plain, "plaintext") and not spec.matches(tls, "plaintext")
    assert spec.matches(tls, ("SSL", "SASL_SSL"))
    # A service that does not say which protocol it speaks is not ruled out.
    assert spec.matches(silent, "sasl_ssl")


def test_services_sort_brokers_first_then_by_cluster_and_node() -> None:
    services = [
        KafkaService("z", 1, ("192.0.2.1",)),
        KafkaService("p", 1, ("192.0.2.1",), role="proxy"),
        KafkaService("b2", 1, ("192.0.2.1",), role="broker", cluster_id="c", node_id=2),
        KafkaService("b10", 1, ("192.0.2.1",), role="broker", cluster_id="c", node_id=10),
        KafkaService("a1", 1, ("192.0.2.1",), role="broker", cluster_id="a", node_id=1),
    ]
    assert [s.name for s in sort_services(services)] == ["a1", "b2", "b10", "p", "z"]


def test_instance_names_fit_a_dns_label_and_keep_the_port() -> None:
    assert instance_name("broker", 3, "laptop", 9092) == "brokerlite 3 on laptop:9092"
    assert instance_name("proxy", None, "laptop", 19092) == "trafka proxy on laptop:19092"
    long = instance_name("broker", 1, "héllo-" * 20, 65535)
    assert len(long.encode()) <= 63 and long.endswith(":65535")
    long.encode().decode()  # cut on a character boundary


def test_the_sdk_accepts_discovery_specs_in_bootstrap_servers() -> None:
    config = ProducerConfig.from_dict(
        {"bootstrap.servers": "zeroconf:cluster=c1&role=broker,10.0.0.1:9092"}
    )
    assert config.bootstrap_addresses == [("10.0.0.1", 9092)]
    assert config.discovery_specs == [DiscoverySpec(cluster_id="c1", role="broker")]
    assert ProducerConfig.from_dict({"bootstrap.servers": "zeroconf"}).bootstrap_addresses == []
    with pytest.raises(ConfigError, match=r"bootstrap\.servers: .*unknown key 'zone'"):
        ProducerConfig.from_dict({"bootstrap.servers": "zeroconf:zone=a"})
