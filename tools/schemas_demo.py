"""The demo's schema step: one Avro topic end to end through brokerlite's registry.

brokerlite serves its Schema Registry (``--schema-registry-listen``); the SDK's
``AvroSerializer`` registers the payments schema and frames each value (magic
byte 0, the schema id, the Avro payload); a consumer with ``AvroDeserializer``
reads them back as dicts, printed. Checked: every value read equals what was
sent, and each raw value starts with the registered schema's id. Needs the
``schemas`` extra (fastavro, httpx): without it the step says ``skipped:``.

The broker runs on a thread of its own: the serdes reach the registry with a
blocking client, which must not wait on the event loop that serves it.
"""

from __future__ import annotations

import json
import struct
import tempfile
from collections.abc import Callable
from typing import Any

from trafka.tools._peers import module_missing, skip

__all__ = ["PAYMENTS", "schema_step"]

TOPIC = "payments"
SCHEMA = {
    "type": "record",
    "name": "Payment",
    "namespace": "demo",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "amount_cents", "type": "long"},
        {
            "name": "currency",
            "type": {"type": "enum", "name": "Currency", "symbols": ["EUR", "USD"]},
        },
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
PAYMENTS: list[dict[str, Any]] = [
    {"id": "p-1", "amount_cents": 1250, "currency": "EUR", "note": "tea"},
    {"id": "p-2", "amount_cents": 9900, "currency": "USD", "note": None},
    {"id": "p-3", "amount_cents": 42, "currency": "EUR", "note": "a stamp"},
]


def schema_step(echo: Callable[[str], None]) -> bool:
    """Run the step, reporting with ``echo``; True when its checks held (or it was skipped)."""
    missing = module_missing("fastavro", "pip install 'trafka[schemas]'") or module_missing(
        "httpx", "pip install 'trafka[schemas]'"
    )
    if missing is not None:
        skip(echo, "the schema registry step", missing)
        return True
    from trafka.brokerlite import broker_in_thread
    from trafka.sdk import NewTopic, blocking
    from trafka.sdk.schemas import AvroDeserializer, AvroSerializer, SchemaRegistryClient

    with (
        tempfile.TemporaryDirectory(prefix="trafka-demo-schemas-") as data_dir,
        broker_in_thread(
            port=0,
            host="127.0.0.1",
            data_dir=data_dir,
            schema_registry_listen="127.0.0.1:0",
            group_initial_rebalance_delay_ms=0,
        ) as broker,
    ):
        assert broker.schema_registry_address is not None
        url = "http://{}:{}".format(*broker.schema_registry_address)
        bootstrap = broker.bootstrap_servers
        echo(f"brokerlite on {bootstrap}, its schema registry at {url}")
        with blocking.Admin(bootstrap_servers=bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, 1)])
        with SchemaRegistryClient({"url": url, "timeout": 30}) as registry:
            serializer = AvroSerializer(registry, json.dumps(SCHEMA))
            with blocking.Producer(bootstrap_servers=bootstrap, value_serializer=serializer) as p:
                for payment in PAYMENTS:
                    p.send(TOPIC, payment, key=payment["id"].encode())
                p.flush()
            registered = registry.get_latest_version(f"{TOPIC}-value")
            echo(
                f"producer: {len(PAYMENTS)} payments in Avro, schema {TOPIC}-value version "
                f"{registered.version} (id {registered.schema_id}) registered by the serializer"
            )
            raw = _read(blocking, bootstrap, None)
            decoded = _read(blocking, bootstrap, AvroDeserializer(registry))
        ids = {struct.unpack(">bI", value[:5]) for value in raw}
        for value in decoded:
            echo(f"  decoded: {json.dumps(value)}")
        framed = ids == {(0, registered.schema_id)}
        same = decoded == PAYMENTS
        echo(f"  {'ok' if framed else 'FAILED'}: each value framed with magic byte 0 and id "
             f"{registered.schema_id}")  # fmt: skip
        echo(
            f"  {'ok' if same else 'FAILED'}: the consumer's AvroDeserializer gave back every payment"
        )
        return framed and same


def _read(blocking: Any, bootstrap: str, deserializer: Any) -> list[Any]:
    """The topic's values, from the start (raw bytes without a deserializer)."""
    settings = {} if deserializer is None else {"value_deserializer": deserializer}
    with blocking.Consumer(bootstrap_servers=bootstrap, **settings) as consumer:
        consumer.assign([(TOPIC, 0)])
        consumer.seek_to_beginning()
        values: list[Any] = []
        while len(values) < len(PAYMENTS):
            for records in consumer.getmany(timeout_ms=10_000).values():
                values.extend(r.value for r in records)
        return values
