"""confluent-kafka's legacy ``MessageSerializer``: Avro records in the Schema
Registry's payload framing (magic byte 0, the schema id in 4 bytes big-endian,
then Avro's binary encoding), over any registry client with the legacy
client's calls (``register``, ``check_registration``, ``get_by_id``,
``auto_register_schemas``).

Rules (confluent-kafka 2.16's):

* ``encode_record_with_schema`` registers the schema under ``{topic}-value``
  (``{topic}-key`` for a key), or only looks it up when the client's
  ``auto_register_schemas`` is false; one writer is made per schema id and
  kept.
* ``decode_message`` reads the id, fetches the writer schema by id, and reads
  with the reader schema given for keys or values (schema evolution) if any;
  one reader is made per schema id (and key or value) and kept.
* Records are written and read by fastavro, as confluent-kafka does when it
  is installed: a dict may lack a field that has a default, and logical types
  (timestamps, decimals...) are Python's datetimes, Decimals...
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from typing import Any, BinaryIO

from trafka.sdk.schemas.framing import FramingError, id_frame, read_frame

from ..error import ClientError
from . import KeySerializerError, SerializerError, ValueSerializerError

__all__ = ["MessageSerializer"]

log = logging.getLogger(__name__)

MAGIC_BYTE = 0

Encoder = Callable[[Any, BinaryIO], None]
Decoder = Callable[[BinaryIO], Any]


def _fastavro() -> Any:
    try:
        import fastavro
    except ImportError:
        raise ImportError(
            "confluent_kafka.avro needs fastavro: pip install 'trafka[schemas]'"
        ) from None
    return fastavro


def _parsed(schema: Any) -> Any:
    """An ``avro`` schema (or its JSON text) as fastavro's parsed schema."""
    return _fastavro().parse_schema(json.loads(str(schema)))


class MessageSerializer:
    """Encode records to, and decode them from, Schema Registry framed Avro.

    Args:
        registry_client: a :class:`~..cached_schema_registry_client.CachedSchemaRegistryClient`
            (or an object with its calls).
        reader_key_schema, reader_value_schema: the schemas keys and values
            are read as (None: as written).
    """

    def __init__(
        self,
        registry_client: Any,
        reader_key_schema: Any = None,
        reader_value_schema: Any = None,
    ) -> None:
        self.registry_client = registry_client
        self.id_to_decoder_func: dict[Any, Decoder] = {}
        self.id_to_writers: dict[int, Encoder] = {}
        self.reader_key_schema = reader_key_schema
        self.reader_value_schema = reader_value_schema

    def _get_encoder_func(self, writer_schema: Any) -> Encoder:
        """``write(record, out)`` for ``writer_schema``."""
        fastavro = _fastavro()
        parsed = _parsed(writer_schema)

        def write(record: Any, out: BinaryIO) -> None:
            fastavro.schemaless_writer(out, parsed, record)

        return write

    def encode_record_with_schema(
        self, topic: str, schema: Any, record: Any, is_key: bool = False
    ) -> bytes:
        """``record`` framed and encoded with ``schema``, registered (or looked
        up) under the topic's subject (see the module).

        Raises:
            KeySerializerError / ValueSerializerError: the registry gave no id.
            ClientError: the registry refused the schema.
        """
        error = KeySerializerError if is_key else ValueSerializerError
        subject = f"{topic}-key" if is_key else f"{topic}-value"
        if self.registry_client.auto_register_schemas:
            schema_id = self.registry_client.register(subject, schema)
        else:
            schema_id = self.registry_client.check_registration(subject, schema)
        if not schema_id:
            raise error(f"Unable to retrieve schema id for subject {subject}")
        if schema_id not in self.id_to_writers:
            self.id_to_writers[schema_id] = self._get_encoder_func(schema)
        return self.encode_record_with_schema_id(schema_id, record, is_key=is_key)

    def encode_record_with_schema_id(
        self, schema_id: int, record: Any, is_key: bool = False
    ) -> bytes:
        """``record`` framed and encoded with the registry's schema ``schema_id``.

        Raises:
            KeySerializerError / ValueSerializerError: the registry has no such
                schema, or could not be asked.
        """
        error = KeySerializerError if is_key else ValueSerializerError
        writer = self.id_to_writers.get(schema_id)
        if writer is None:
            try:
                schema = self.registry_client.get_by_id(schema_id)
            except ClientError as exc:
                raise error(f"unable to fetch schema with id {schema_id}: {exc}") from exc
            if not schema:
                raise error("Schema does not exist")
            writer = self.id_to_writers[schema_id] = self._get_encoder_func(schema)
        try:
            head = id_frame(schema_id)
        except FramingError as exc:
            raise error(str(exc)) from None
        out = io.BytesIO()
        out.write(head)
        writer(record, out)
        return out.getvalue()

    def _get_decoder_func(self, schema_id: int, payload: BinaryIO, is_key: bool = False) -> Decoder:
        """``read(payload)`` for the writer schema ``schema_id`` and the reader
        schema of keys or values (``payload`` is not read here)."""
        cached = self.id_to_decoder_func.get((schema_id, is_key))
        if cached is not None:
            return cached
        try:
            writer_schema = self.registry_client.get_by_id(schema_id)
        except ClientError as exc:
            raise SerializerError(f"unable to fetch schema with id {schema_id}: {exc}") from None
        if writer_schema is None:
            raise SerializerError(f"unable to fetch schema with id {schema_id}")
        reader_schema = self.reader_key_schema if is_key else self.reader_value_schema
        fastavro = _fastavro()
        writer = _parsed(writer_schema)
        reader = None if reader_schema is None else _parsed(reader_schema)

        def read(p: BinaryIO) -> Any:
            return fastavro.schemaless_reader(p, writer, reader)

        self.id_to_decoder_func[(schema_id, is_key)] = read
        return read

    def decode_message(self, message: bytes | None, is_key: bool = False) -> Any:
        """The record in ``message`` (a framed key or value); None for None.

        Raises:
            SerializerError: 5 bytes or fewer, a magic byte other than 0, or a
                schema id the registry does not know.
        """
        if message is None:
            return None
        if len(message) <= 5:
            raise SerializerError("message is too small to decode")
        if message[0] != MAGIC_BYTE:
            raise SerializerError("message does not start with magic byte")
        ref, start = read_frame(message, with_indexes=False)
        assert ref.schema_id is not None  # (magic byte 0 frames an id)
        payload = io.BytesIO(message)
        payload.seek(start)
        return self._get_decoder_func(ref.schema_id, payload, is_key)(payload)
