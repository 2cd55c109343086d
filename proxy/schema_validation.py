"""A filter refusing records that do not carry a schema of their topic's subject.

``SchemaValidation`` checks each Produce request before it reaches a broker
(and before key routing moves its records): every record value (and key, with
``validate.keys``) of a topic it validates must be framed as Schema Registry
serializers frame it (a magic byte and schema id before the payload, or the
``__value_schema_id`` / ``__key_schema_id`` header), the schema must be
registered under the topic's subject (``<topic>-value`` / ``<topic>-key``,
the topic name strategy) and the payload must decode with it (Avro, Protobuf,
JSON Schema, validated as :mod:`trafka.sdk.schemas`'s deserializers do).

Rules:

* A partition's batch with one record that fails is refused whole: the
  partition's answer is ``INVALID_RECORD`` with the record's index in the
  batch and the reason (``record_errors`` and ``error_message``, KIP-467, as
  Kafka answers a batch its broker refused), and none of the batch is written.
  The request's other partitions go to their brokers as usual; the client gets
  one answer with all of them.
* A null value or key (a tombstone) passes: it has no schema.
* A request with ``acks=0`` gets no answer, so a refused partition closes the
  client's connection, as Kafka's broker does on an error it cannot report;
  the request's other partitions are not written either.
* A batch the proxy cannot decode is passed on: the broker judges it (CORRUPT_MESSAGE).
* The registry is asked once per schema id (and subject): the answers are kept
  for the filter's life; a schema id found not (yet) in a subject is asked
  again on the next request that carries it. An unreachable registry refuses
  the batch (``INVALID_RECORD``, naming the registry's error): nothing is
  written that was not checked.
* The check runs on a worker thread, off the proxy's event loop.

Settings (the ``[[filter]]`` entry's ``settings`` table, or the constructor's
``settings``): ``schema.registry.url`` (required) and the registry client's
other settings (``basic.auth.user.info``, ``schema.registry.ssl.ca.location``...,
as :class:`~trafka.sdk.schemas.RegistryConfig` takes them), ``topics`` (a list
of regular expressions matched against whole topic names; default every topic
not starting with ``_``), ``validate.keys`` (default false) and
``validate.values`` (default true); each also in Python's spelling
(``validate_keys``). Every problem of the settings is reported at once (a
:class:`~trafka.sdk.ConfigError`): an unknown name with the nearest known one.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import trio

from trafka.codec import ApiKey, ErrorCode
from trafka.codec import protocol as _protocol
from trafka.codec.errors import DecodeError
from trafka.codec.messages.k00_produce import ProduceResponse
from trafka.codec.records import decode_records
from trafka.sdk import ConfigError
from trafka.sdk.schemas.framing import FramingError, header_name, read_frame
from trafka.sdk.schemas.registry_config import SETTINGS
from trafka.sdk.schemas.types import SchemaRegistryError, SchemaSerializationError

from .filters import CloseConnection, EncodedBody, Filter, FilterContext, Respond

__all__ = ["REGISTRY_SETTINGS", "SchemaValidation"]

_OWN = ("topics", "validate.keys", "validate.values")
# The registry client's settings (RegistryConfig's names, without the
# ``schema.registry.`` prefix the filter's table may give them).
REGISTRY_SETTINGS = SETTINGS
_PREFIX = "schema.registry."
# What "did you mean" offers: the names as a [[filter]] table spells them.
_SPELLINGS = (*_OWN, *sorted(_PREFIX + name for name in REGISTRY_SETTINGS))
_Partition = ProduceResponse.PartitionProduceResponse


class SchemaValidation(Filter):
    """Refuse Produce batches whose records do not carry a schema of their topic's
    subject (see the module doc).

    Args:
        settings: as the ``[[filter]]`` entry's settings table (see the module
            doc); or give them through :meth:`configure`.
    """

    api_keys = frozenset({ApiKey.PRODUCE})

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        self._lock = threading.Lock()
        self._registry: Any = None
        self._registry_conf: dict[str, Any] = {}
        self._topics: list[re.Pattern[str]] = []
        self._keys, self._values = False, True
        self._decoder: Any = None  # the SDK's deserializers, one per registry type
        self._subjects: dict[Any, frozenset[str]] = {}
        self.refused = 0  # batches refused since the start
        if settings is not None:
            self.configure(settings)

    def configure(self, settings: Mapping[str, Any]) -> None:
        """Take the settings (see the module doc).

        Raises:
            ConfigError: every problem found, each in its ``problems`` (a
                ValueError): an unknown setting (with the nearest known name),
                ``schema.registry.url`` missing, a value of the wrong type, a
                topic pattern that is not a regular expression, or what the
                registry client refuses.
        """
        # The filter's own names as the registry's are read: dotted, or Python's spelling.
        conf = {_own_name(key): value for key, value in settings.items()}
        problems = [
            f"unknown setting {key!r}{_nearest(key)}"
            for key in conf
            if key not in _OWN and _registry_name(key) not in REGISTRY_SETTINGS
        ]
        if not any(_registry_name(key) == "url" and conf[key] for key in conf):
            problems.append("missing setting 'schema.registry.url' (the registry's URL)")
        patterns = conf.pop("topics", ["[^_].*"])
        topics: list[re.Pattern[str]] = []
        if isinstance(patterns, str) or not isinstance(patterns, list | tuple):
            problems.append(f"topics: {patterns!r} is not a list of regular expressions")
        else:
            for pattern in patterns:
                try:
                    topics.append(re.compile(pattern))
                except (re.error, TypeError) as exc:
                    problems.append(f"topics: {pattern!r} is not a regular expression: {exc}")
        keys, values = conf.pop("validate.keys", False), conf.pop("validate.values", True)
        for name, value in (("validate.keys", keys), ("validate.values", values)):
            if not isinstance(value, bool):
                problems.append(f"{name}: {value!r} is not true or false")
        if not problems:  # the registry client's own checks of its values, once its names are
            from trafka.sdk.schemas import RegistryConfig

            try:
                RegistryConfig.from_dict(conf)  # refused here, not at the first record
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ConfigError("SchemaValidation: " + "; ".join(problems), problems)
        with self._lock:
            if conf != self._registry_conf:
                self._close_registry()
                self._registry_conf = conf
            self._topics, self._keys, self._values = topics, keys, values

    def detach(self) -> None:
        with self._lock:
            self._close_registry()

    def _close_registry(self) -> None:
        if self._registry is not None:
            self._registry.close()
        self._registry, self._decoder, self._subjects = None, None, {}

    def validates(self, topic: str) -> bool:
        """Whether records of ``topic`` are checked."""
        return any(p.fullmatch(topic) for p in self._topics)

    async def on_request(self, ctx: FilterContext, body: Any) -> Any:
        if not any(self.validates(t.name) for t in body.topic_data if t.name):
            return body
        refused = await trio.to_thread.run_sync(self._check_request, body)
        if not refused:
            return body
        self.refused += len(refused)
        if body.acks == 0:
            names = ", ".join(f"{t}-{p}" for t, p in refused)
            raise CloseConnection(f"schema validation refused {names} of an acks=0 produce")
        kept = []
        for t in body.topic_data:
            parts = [p for p in t.partition_data if (t.name, p.index) not in refused]
            if parts:
                kept.append(dataclasses.replace(t, partition_data=parts))
        ctx.notes["schema_refused"] = refused
        if not kept:
            return Respond(_with_refused(ProduceResponse(responses=[]), refused))
        return dataclasses.replace(body, topic_data=kept)

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        refused = ctx.notes.get("schema_refused")
        if not refused:
            return body
        if isinstance(body, EncodedBody):
            body = _protocol.decode_response_body(ApiKey.PRODUCE, ctx.api_version, body.data)
        return _with_refused(body, refused)

    # -- the check, on a worker thread ------------------------------------------------

    def _check_request(self, body: Any) -> dict[tuple[str, int], tuple[int, str]]:
        """The partitions refused: (topic, partition) -> (record index, reason)."""
        refused = {}
        for t in body.topic_data:
            if not t.name or not self.validates(t.name):
                continue
            for p in t.partition_data:
                why = self._check_batch(t.name, p.index, p.records)
                if why is not None:
                    refused[(t.name, p.index)] = why
        return refused

    def _check_batch(self, topic: str, partition: int, blob: Any) -> tuple[int, str] | None:
        if not blob:
            return None
        try:
            records = list(decode_records(blob))
        except DecodeError:
            return None  # the broker judges what cannot be read
        for i, record in enumerate(records):
            for is_key, data in ((True, record.key), (False, record.value)):
                if data is None or not (self._keys if is_key else self._values):
                    continue
                why = self._check_one(topic, partition, data, record.headers, is_key)
                if why is not None:
                    return i, f"record {i} {'key' if is_key else 'value'}: {why}"
        return None

    def _check_one(
        self, topic: str, partition: int, data: bytes, headers: Iterable[Any], is_key: bool
    ) -> str | None:
        subject = f"{topic}-{'key' if is_key else 'value'}"
        named = header_name(is_key)
        frame = next((bytes(v) for k, v in reversed(list(headers)) if k == named and v), data)
        try:
            ref, _ = read_frame(frame, with_indexes=False)
        except FramingError as exc:
            return f"not a schema registry frame: {exc}"
        registry = self._client()
        what = f"schema id {ref.schema_id}" if ref.guid is None else f"schema {ref.guid}"
        try:
            if ref.guid is not None:
                schema = registry.get_schema_by_guid(ref.guid)
            else:
                schema = registry.get_schema(ref.schema_id)
            if subject not in self._subjects_of(registry, ref, schema, subject):
                return f"{what} is not registered under subject {subject!r}"
        except SchemaRegistryError as exc:
            if exc.error_code in (40403, 40401):
                return f"{what} is not registered under subject {subject!r}"
            return f"the registry could not be asked about {what}: {exc.message}"
        try:
            self._serde(schema.schema_type).deserialize_record(
                data, topic, partition, None, headers, is_key
            )
        except SchemaSerializationError as exc:
            return exc.reason
        return None

    def _subjects_of(self, registry: Any, ref: Any, schema: Any, subject: str) -> frozenset[str]:
        key = ref.schema_key
        known = self._subjects.get(key, frozenset())
        if subject in known:
            return known
        if ref.guid is not None:
            # A GUID names no id: ask the subject whether it holds the schema.
            registry.lookup_schema(subject, schema)
            found = known | {subject}
        else:
            uses = registry.request("GET", f"/schemas/ids/{ref.schema_id}/versions")
            found = frozenset(str(u["subject"]) for u in uses)
        self._subjects[key] = found
        return found

    def _client(self) -> Any:
        with self._lock:
            if self._registry is None:
                from trafka.sdk.schemas import SchemaRegistryClient

                self._registry = SchemaRegistryClient(self._registry_conf)
            return self._registry

    def _serde(self, schema_type: str) -> Any:
        registry = self._client()
        with self._lock:
            if self._decoder is None:
                from trafka.sdk.schemas.decoded import DecodingDeserializer

                self._decoder = DecodingDeserializer(registry)
            return self._decoder.deserializer_for(schema_type)


def _own_name(key: str) -> str:
    dotted = key.replace("_", ".")
    return dotted if dotted in _OWN else key


def _registry_name(key: str) -> str:
    """A setting's registry name as RegistryConfig reads it (Python's
    underscores as dots, the ``schema.registry.`` prefix dropped)."""
    name = key.replace("_", ".")
    return name[len(_PREFIX) :] if name.startswith(_PREFIX) else name


def _nearest(key: str) -> str:
    close = difflib.get_close_matches(key.replace("_", "."), _SPELLINGS, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _with_refused(body: Any, refused: Mapping[tuple[str, int], tuple[int, str]]) -> Any:
    """A Produce answer with the refused partitions' INVALID_RECORD answers added."""
    topics = {t.name: list(t.partition_responses) for t in body.responses}
    for (topic, partition), (index, why) in sorted(refused.items()):
        topics.setdefault(topic, []).append(
            _Partition(
                index=partition,
                error_code=ErrorCode.INVALID_RECORD,
                base_offset=-1,
                log_append_time_ms=-1,
                log_start_offset=-1,
                record_errors=[
                    ProduceResponse.BatchIndexAndErrorMessage(
                        batch_index=index, batch_index_error_message=why
                    )
                ],
                error_message=f"schema validation refused the batch: {why}",
            )
        )
    answer = ProduceResponse.TopicProduceResponse
    by_name = {t.name: t for t in body.responses}
    responses = [
        dataclasses.replace(by_name[name], partition_responses=parts)
        if name in by_name
        else answer(name=name, partition_responses=parts)
        for name, parts in topics.items()
    ]
    return dataclasses.replace(body, responses=responses)
