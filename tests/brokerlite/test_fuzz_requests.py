"""Random requests of every served API and version, against the sans-IO broker.

The codec's fuzz tests show that hostile bytes never get past the decoders;
these show what happens to requests that do decode. Every request of a served
version must be answered, with error codes where its values make no sense
(negative partitions, unknown groups, offsets out of range, producer ids
nobody was given, configs that do not exist), never by an internal error or a
response that cannot be encoded. The only request the broker may answer by
closing the connection is a Produce with ``acks=0`` that failed, as Kafka does.

The requests come from the codec's own strategies (``tests/codec/strategies.py``),
then :func:`plausible` replaces some of their values with ones this broker knows
(its topic, partitions 0-3, real config names, valid record batches, special
offsets and timestamps), so that the handlers get past "unknown topic" and
into their real work. One broker serves the whole module, so requests also
meet the state earlier ones left behind. A second test mutates the bytes of
valid frames before ``handle_frame`` decodes them.

``TRAFKA_FUZZ_EXAMPLES=N`` runs N examples per API version (and 6N mutated
frames per API) instead of CI's few, for a longer hunt. CI's few: 6 per
version (some 250 versions, each run with a random seed of its own, so runs
together cover more), which is most of the module's time; 36 mutated frames
per API.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trafka.brokerlite.broker import Broker
from trafka.brokerlite.config import BrokerConfig
from trafka.brokerlite.handlers import HANDLERS
from trafka.brokerlite.outcomes import Close, NoResponse, Outcome, Parked, Reply
from trafka.brokerlite.security.authorizer import AclBinding
from trafka.codec.acl import AclOperation, AclResourceType, PatternType
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k19_create_topics as create_topics
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import api, decode_response, encode_request
from trafka.codec.records import encode_batch

# The codec's strategies live beside the codec tests.
_CODEC_TESTS = str(Path(__file__).resolve().parents[1] / "codec")
if _CODEC_TESTS not in sys.path:
    sys.path.insert(0, _CODEC_TESTS)

from strategies import message_strategy, sample_message  # noqa: E402

START_MS = 1_700_000_000_000
TOPIC = "fuzzed"
EXAMPLES = int(os.environ.get("TRAFKA_FUZZ_EXAMPLES", "6"))
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

SERVED = [
    pytest.param(key, version, id=f"{api(key).name}-v{version}")
    for key, spec in sorted(HANDLERS.items())
    for version in range(spec.min_version, spec.max_version + 1)
]

NAMES = [TOPIC, TOPIC, "absent", "group-1", "", "__consumer_offsets"]
CONFIG_NAMES = [
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "segment.ms",
    "cleanup.policy",
    "max.message.bytes",
    "message.timestamp.type",
    "compression.type",
    "min.insync.replicas",
    "no.such.config",
    "num.partitions",
]
CONFIG_VALUES = ["-5", "0", "1", "9223372036854775807", "1e999", "abc", "", None]
CONFIG_VALUES += ["delete", "compact", "compact,delete", "LogAppendTime", "gzip", "true"]
# Integer fields by a piece of their name: values at the edges of what they mean.
INTS = {
    "partition": [0, 1, 2, 3, -1],
    "index": [0, 1, 2, 3, -1],
    "offset": [-2, -1, 0, 1, 3, 2**62],
    "generation": [-1, 0, 1, 2],
    "epoch": [-1, 0, 1, 2, 32767],
    "producer_id": [-1, 0, 1, 2],
    "timestamp": [-1, -2, -3, -4, 0, START_MS],
    "max_bytes": [0, 1, -1, 2**20, 2**31 - 1],
    "min_bytes": [0, 1, -1, 2**31 - 1],
    "wait": [0, -1, 5, 500],
    "session": [0, -1, 1, 2],
    "timeout": [0, -1, 1, 100, 2**31 - 1],
    "count": [-1, 0, 1, 2, 4, 10**6],
    "replication": [-1, 1, 2, 3],
}
_NAMED = ("name", "topic", "group", "transactional_id", "_id")


def a_batch(rnd: random.Random) -> bytes:
    """A valid record batch with random producer fields, flags and codec."""
    pid = rnd.choice([-1, -1, 0, 1, 2, 2**40])
    records = [
        (
            START_MS + rnd.choice([0, 5, -(10**12), 10**12]),
            rnd.choice([None, b"k"]),
            rnd.choice([None, b"v" * rnd.randrange(50)]),
            (),
        )
        for _ in range(rnd.randrange(1, 4))
    ]
    return encode_batch(
        records,
        producer_id=pid,
        producer_epoch=rnd.choice([0, 0, 1, 5, 32767]) if pid >= 0 else -1,
        base_sequence=rnd.choice([0, 0, 1, 2, 5, 2**31 - 1]) if pid >= 0 else -1,
        is_transactional=pid >= 0 and rnd.random() < 0.4,
        compression=rnd.choice([0, 0, 1, 2, 3, 4]),
    )


def _is_default(field: dataclasses.Field[Any], value: Any) -> bool:
    # A field the version lacks keeps its default and must keep it to encode.
    if field.default is not dataclasses.MISSING:
        return bool(value == field.default)
    if field.default_factory is not dataclasses.MISSING:
        return bool(value == field.default_factory())
    return False


# int16 fields whose names INTS matches with int32 choices (the share state's).
_INT16 = frozenset({"delivery_count"})


def plausible(message: Any, rnd: random.Random) -> None:
    """Replace some of ``message``'s values, in place, with ones the broker knows."""
    if not dataclasses.is_dataclass(message):
        return
    in_config = "Config" in type(message).__name__
    for field in dataclasses.fields(message):
        value = getattr(message, field.name)
        name = field.name.lower()
        if _is_default(field, value):
            continue
        new = value
        if isinstance(value, list):
            for item in value:
                plausible(item, rnd)
        elif dataclasses.is_dataclass(value):
            plausible(value, rnd)
        elif rnd.random() >= 0.7:
            pass
        elif in_config and name in ("name", "key") and isinstance(value, str):
            new = rnd.choice(CONFIG_NAMES)
        elif in_config and name == "value":
            new = rnd.choice(CONFIG_VALUES)
        elif name == "records":
            new = a_batch(rnd) + (a_batch(rnd) if rnd.random() < 0.2 else b"")
        elif isinstance(value, str) and any(part in name for part in _NAMED):
            new = rnd.choice(NAMES)
        elif isinstance(value, int) and not isinstance(value, bool):
            for part, choices in INTS.items():
                if part in name:
                    if name in _INT16:
                        choices = [c for c in choices if -(2**15) <= c < 2**15]
                    new = rnd.choice(choices)
                    break
        if new is not value:
            object.__setattr__(message, field.name, new)


class ErrorLog(logging.Handler):
    """Collects the broker's ERROR records: an internal error logs one."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Fuzzed:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.now = START_MS
        self.errors = ErrorLog()

    def frame(self, key: int, version: int, body: Any) -> bytes:
        header = RequestHeader(
            request_api_key=key, request_api_version=version, correlation_id=7, client_id="fuzz"
        )
        return encode_request(header, body)[4:]

    def check(self, outcome: Outcome, what: str, *, may_close: bool) -> None:
        """The outcome is an answer that encodes, or a close only where allowed;
        nothing was logged as an error. Parked requests are completed (by moving
        the clock past any wait) and checked the same way."""
        self.now += 3
        completions = self.broker.poll(self.now)
        if isinstance(outcome, Parked):
            # Past any session timeout first; then past the longest fetch wait.
            for step in (60_000, 2**31):
                if outcome.ticket not in {c.ticket for c in completions}:
                    self.now += step
                    completions += self.broker.poll(self.now)
            assert outcome.ticket in {c.ticket for c in completions}, f"{what}: still parked"
        errors = [r.getMessage() for r in self.errors.records]
        self.errors.records.clear()
        assert not errors, f"{what}: the broker logged {errors}"
        if isinstance(outcome, Close):
            assert may_close, f"{what}: connection closed ({outcome.reason})"
        else:
            assert isinstance(outcome, Reply | NoResponse | Parked), outcome
        for reply in [outcome] + [c.reply for c in completions]:
            if isinstance(reply, Reply):
                data = b"".join(
                    bytes(p) if isinstance(p, bytes | bytearray | memoryview) else p.read()
                    for p in reply.encode()
                )
                (size,) = struct.unpack_from(">i", data)
                assert size == len(data) - 4, what
                decode_response(data[4:], reply.api_key, reply.api_version)


# With the authorizer on, the fuzzing principal (User:ANONYMOUS) may do some
# things and not others, so that requests take both sides of every check.
_ACLS = [
    (AclResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, AclOperation.CREATE, True),
    (AclResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, AclOperation.IDEMPOTENT_WRITE, True),
    (AclResourceType.TOPIC, TOPIC, PatternType.LITERAL, AclOperation.ALL, True),
    (AclResourceType.TOPIC, "fuzz", PatternType.PREFIXED, AclOperation.DELETE, False),
    (AclResourceType.GROUP, "*", PatternType.LITERAL, AclOperation.READ, True),
    (AclResourceType.GROUP, "a", PatternType.PREFIXED, AclOperation.ALL, False),
    (AclResourceType.TRANSACTIONAL_ID, "*", PatternType.LITERAL, AclOperation.WRITE, True),
]  # fmt: skip


@pytest.fixture(scope="module", params=["open", "acls"])
def fuzzed(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Fuzzed]:
    acls = request.param == "acls"
    config = BrokerConfig(
        port=0,
        data_dir=tmp_path_factory.mktemp("fuzz") / "data",
        group_initial_rebalance_delay_ms=0,
        authorizer_class_name=AUTHORIZER if acls else None,
    )
    broker = Broker(config, now_ms=START_MS, advertised=("127.0.0.1", 9999))
    if broker.authorizer is not None:
        created = broker.authorizer.create(
            AclBinding(rtype, name, ptype, "User:ANONYMOUS", "*", op, 3 if allow else 2)
            for rtype, name, ptype, op, allow in _ACLS
        )
        assert all(code == 0 for code, _ in created), created
    state = Fuzzed(broker)
    log = logging.getLogger("trafka.brokerlite")
    log.addHandler(state.errors)
    try:
        create = create_topics.CreateTopicsRequest
        body = create(
            topics=[create.CreatableTopic(name=TOPIC, num_partitions=3, replication_factor=1)]
        )
        outcome = broker.handle_frame(1, state.frame(19, 7, body), state.now)
        assert isinstance(outcome, Reply) and outcome.body.topics[0].error_code == 0
        put = produce.ProduceRequest
        for partition in range(3):
            records = [(START_MS + i, None, b"v%d" % i, ()) for i in range(5)]
            data = put.PartitionProduceData(index=partition, records=encode_batch(records))
            body = put(
                acks=-1,
                timeout_ms=1000,
                topic_data=[put.TopicProduceData(name=TOPIC, partition_data=[data])],
            )
            outcome = broker.handle_frame(1, state.frame(0, 9, body), state.now)
            assert isinstance(outcome, Reply)
        yield state
    finally:
        log.removeHandler(state.errors)
        broker.close()


@pytest.mark.parametrize(("key", "version"), SERVED)
def test_every_served_request_is_answered(fuzzed: Fuzzed, key: int, version: int) -> None:
    schema = api(key).module.REQUEST_SCHEMAS[version]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(message=message_strategy(schema), seed=st.integers(0, 2**32))
    def run(message: Any, seed: int) -> None:
        plausible(message, random.Random(seed))
        outcome = fuzzed.broker.handle_frame(
            seed % 4 + 1, fuzzed.frame(key, version, message), fuzzed.now
        )
        acks_zero = key == 0 and message.acks == 0
        fuzzed.check(outcome, f"{api(key).name} v{version} {message!r:.2000}", may_close=acks_zero)

    run()


def _mutate(frame: bytes, rnd: random.Random) -> bytes:
    out = bytearray(frame)
    for _ in range(rnd.choice([1, 1, 2, 3, 8])):
        at = rnd.randrange(len(out))
        op = rnd.randrange(5)
        if op == 0:
            out[at] = rnd.randrange(256)
        elif op == 1:
            del out[max(at, 4) :]  # keep the API key and version
        elif op == 2:
            out[at:at] = rnd.randbytes(rnd.randrange(1, 6))
        elif op == 3:
            out[at : at + 4] = struct.pack(">i", rnd.choice([-1, -2, 2**31 - 1, 1 << 20, 3]))
        else:
            out[at : at + 2] = struct.pack(">h", rnd.choice([-1, 2**15 - 1, 5, 0]))
        if not out:
            break
    return bytes(out)


@pytest.mark.parametrize("key", sorted(HANDLERS), ids=lambda k: api(k).name)
@settings(max_examples=6 * EXAMPLES, deadline=None, database=None)
@given(seed=st.integers(0, 2**32))
def test_mutated_frames_are_answered_or_refused(fuzzed: Fuzzed, key: int, seed: int) -> None:
    rnd = random.Random(seed)
    spec = HANDLERS[key]
    version = rnd.randint(spec.min_version, spec.max_version)
    message = sample_message(api(key).module.REQUEST_SCHEMAS[version], rnd.randrange(3))
    plausible(message, rnd)
    frame = _mutate(fuzzed.frame(key, version, message), rnd)
    outcome = fuzzed.broker.handle_frame(rnd.randrange(1, 5), frame, fuzzed.now)
    # A mutated frame may no longer decode (the connection is closed), or
    # decode as other values (answered like any request).
    fuzzed.check(outcome, f"mutated {api(key).name} v{version}: {frame!r:.400}", may_close=True)
