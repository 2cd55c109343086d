"""No client can forge a line in the broker's or the proxy's log.

Every string a client sends (client id, transactional id, group, member and
instance ids, topic and resource names, principals, SASL mechanisms and user
names, config names and values...) may hold a newline followed by what looks
like a log line of its own. The broker and the proxy write such strings
escaped (``%r``), so every log record stays one line.

Three ways in: requests made for the log lines they cause, through a real
SASL broker with ACLs; the same kind through the proxy; and a sweep of every
served API and version through the sans-IO core with every string field of the
request (and the client id) hostile. Each checks every record logged, at any
level, and that the hostile text did reach the log (escaped).
"""

from __future__ import annotations

import dataclasses
import logging
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerlite_wire import produce_body

from trafka.brokerlite.broker import Broker
from trafka.brokerlite.config import BrokerConfig
from trafka.brokerlite.handlers import HANDLERS
from trafka.brokerlite.server import broker_in_thread
from trafka.codec.messages import k11_join_group as join_group
from trafka.codec.messages import k13_leave_group as leave_group
from trafka.codec.messages import k17_sasl_handshake as handshake
from trafka.codec.messages import k22_init_producer_id as init_producer_id
from trafka.codec.messages import k30_create_acls as create_acls
from trafka.codec.messages import k36_sasl_authenticate as authenticate
from trafka.codec.messages import k44_incremental_alter_configs as alter_configs
from trafka.codec.messages import k49_alter_client_quotas as quotas
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import api, decode_response, encode_request
from trafka.proxy import proxy_in_thread

_CODEC_TESTS = str(Path(__file__).resolve().parents[1] / "codec")
if _CODEC_TESTS not in sys.path:
    sys.path.insert(0, _CODEC_TESTS)

from strategies import sample_message  # noqa: E402

pytestmark = pytest.mark.timeout(120)

FORGED = "\n2025-01-01 00:00:00,000 ERROR trafka.brokerlite: FORGED\r\x1b[31m"
HOSTILE = "evil" + FORGED
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class Records(logging.Handler):
    """Every record of the ``trafka`` loggers, at every level."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def check(self) -> None:
        """No record spans lines; the hostile text reached the log, escaped."""
        messages = [r.getMessage() for r in self.records]
        forged = [m for m in messages if "\n" in m or "\r" in m]
        assert not forged, forged
        assert any("FORGED" in m for m in messages), messages


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    root = logging.getLogger("trafka")
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


class Client:
    """Raw frames, every request with the hostile client id."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def send(self, key: int, version: int, body: Any) -> None:
        self.raw.send(key, version, body, client_id=HOSTILE)

    def call(self, key: int, version: int, body: Any) -> Any:
        self.send(key, version, body)
        _, answer = decode_response(self.raw.read_frame(), key, version)
        return answer

    def login(self, user: str, password: str) -> Any:
        self.call(17, 1, handshake.SaslHandshakeRequest(mechanism="PLAIN"))
        token = b"\0" + user.encode() + b"\0" + password.encode()
        return self.call(36, 2, authenticate.SaslAuthenticateRequest(auth_bytes=token))


def join_and_leave(client: Client) -> None:
    """A static member joins a group and leaves it: group, member, instance ids and
    the protocol name are logged."""
    Join = join_group.JoinGroupRequest
    joined = client.call(
        11,
        9,
        Join(
            group_id=HOSTILE,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            group_instance_id=HOSTILE,
            protocol_type="consumer",
            protocols=[Join.JoinGroupRequestProtocol(name=HOSTILE, metadata=b"")],
        ),
    )
    assert joined.error_code == 0, joined
    Leave = leave_group.LeaveGroupRequest
    left = client.call(
        13,
        5,
        Leave(
            group_id=HOSTILE,
            members=[Leave.MemberIdentity(member_id=joined.member_id, group_instance_id=HOSTILE)],
        ),
    )
    assert left.error_code == 0, left


def begin_transaction(client: Client) -> None:
    """The transaction coordinator logs the transactional id (the reported line)."""
    answer = client.call(
        22,
        4,
        init_producer_id.InitProducerIdRequest(
            transactional_id=HOSTILE, transaction_timeout_ms=60_000
        ),
    )
    assert answer.error_code == 0, answer


def produce_unanswered(client: Client) -> None:
    """An acks=0 Produce that fails closes the connection, naming the topic."""
    client.send(0, 9, produce_body(HOSTILE, [b"v"], acks=0))
    assert client.raw.is_closed_by_peer()


def test_a_sasl_broker_with_acls_logs_client_strings_escaped(
    data_dir: Path, raw_client: Any, records: Records
) -> None:
    with broker_in_thread(
        port=0,
        data_dir=data_dir,
        group_initial_rebalance_delay_ms=0,
        security_protocol="SASL_PLAINTEXT",
        sasl_users="alice:secret",
        authorizer_class_name=AUTHORIZER,
        super_users="User:alice",
    ) as running:

        def connect() -> Client:
            return Client(raw_client(running.address))

        # Refused before authentication: the mechanism, then the user name.
        client = connect()
        client.call(17, 1, handshake.SaslHandshakeRequest(mechanism=HOSTILE))
        assert client.raw.is_closed_by_peer()
        client = connect()
        assert client.login(HOSTILE, "wrong").error_code != 0
        assert client.raw.is_closed_by_peer()

        client = connect()
        assert client.login("alice", "secret").error_code == 0
        begin_transaction(client)
        join_and_leave(client)
        Quotas = quotas.AlterClientQuotasRequest
        altered = client.call(
            49,
            1,
            Quotas(
                entries=[
                    Quotas.EntryData(
                        entity=[Quotas.EntityData(entity_type="client-id", entity_name=HOSTILE)],
                        ops=[Quotas.OpData(key="producer_byte_rate", value=1000.0)],
                    )
                ]
            ),
        )
        assert altered.entries[0].error_code == 0, altered
        Acls = create_acls.CreateAclsRequest
        created = client.call(
            30,
            3,
            Acls(
                creations=[
                    Acls.AclCreation(
                        resource_type=2,  # TOPIC
                        resource_name=HOSTILE,
                        resource_pattern_type=3,  # LITERAL
                        principal="User:" + HOSTILE,
                        host="*",
                        operation=2,  # ALL
                        permission_type=3,  # ALLOW
                    )
                ]
            ),
        )
        assert created.results[0].error_code == 0, created
        Configs = alter_configs.IncrementalAlterConfigsRequest
        configured = client.call(
            44,
            1,
            Configs(
                resources=[
                    Configs.AlterConfigsResource(
                        resource_type=16,  # CLIENT_METRICS
                        resource_name=HOSTILE,
                        configs=[
                            Configs.AlterableConfig(name="metrics", value="*"),
                            Configs.AlterableConfig(name="interval.ms", value="1000"),
                        ],
                    )
                ]
            ),
        )
        assert configured.responses[0].error_code == 0, configured
        produce_unanswered(client)

        client = connect()
        assert client.login("alice", "secret").error_code == 0
        client.raw.send_raw(struct.pack(">ihhih", 10, 999, 0, 1, -1))  # unknown API key
        assert client.raw.is_closed_by_peer()
    records.check()


def test_through_the_proxy(data_dir: Path, raw_client: Any, records: Records) -> None:
    with (
        broker_in_thread(port=0, data_dir=data_dir, group_initial_rebalance_delay_ms=0) as running,
        proxy_in_thread(upstream=[running.bootstrap_servers], port=0) as proxy,
    ):
        client = Client(raw_client(proxy.address))
        begin_transaction(client)
        join_and_leave(client)
        produce_unanswered(client)
        client = Client(raw_client(proxy.address))
        client.raw.send_raw(struct.pack(">i", 6) + b"\x00\x00\x00\x09" + FORGED.encode()[:2])
        assert client.raw.is_closed_by_peer()
    records.check()


def _hostile(value: Any) -> Any:
    """``value`` with every string in it (nested messages and lists too) hostile,
    but for fields at their default (the sample leaves those its version lacks so)."""
    if isinstance(value, str):
        return HOSTILE
    if isinstance(value, list):
        return [_hostile(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(
            value,
            **{
                f.name: _hostile(getattr(value, f.name))
                for f in dataclasses.fields(value)
                if f.name != "unknown_tagged_fields" and getattr(value, f.name) != f.default
            },
        )
    return value


def test_every_request_with_hostile_strings(tmp_path: Path, records: Records) -> None:
    """Every served API at its lowest and highest version, through the sans-IO core,
    authorizer on (so that refusals are logged too) and off."""
    for authorizer in (None, AUTHORIZER):
        config = BrokerConfig(
            port=0,
            data_dir=tmp_path / f"data-{authorizer is None}",
            group_initial_rebalance_delay_ms=0,
            authorizer_class_name=authorizer,
            allow_everyone_if_no_acl_found=True,
        )
        broker = Broker(config, now_ms=1_700_000_000_000, advertised=("127.0.0.1", 9999))
        try:
            now = 1_700_000_000_000
            for conn_id, (key, spec) in enumerate(sorted(HANDLERS.items()), start=1):
                broker.connection_opened(conn_id, "127.0.0.1:5000")
                for version in sorted({spec.min_version, spec.max_version}):
                    schema = api(key).module.REQUEST_SCHEMAS[version]
                    body = _hostile(sample_message(schema))
                    header = RequestHeader(
                        request_api_key=key,
                        request_api_version=version,
                        correlation_id=1,
                        client_id=HOSTILE,
                    )
                    broker.handle_frame(conn_id, encode_request(header, body)[4:], now)
                    now += 100_000
                    broker.poll(now)
        finally:
            broker.close()
    records.check()
