"""The Schema Registry wire formats and .proto text, checked against
confluent-kafka's own framing code (its ``SchemaId``, the reference
implementation of the formats) and protobuf's own descriptors.

Confluent's documentation ("Wire format", Schema Registry serdes): magic byte
0, a 4-byte big-endian schema id, then for Protobuf the message indexes as a
zig-zag varint count and zig-zag varints, with the single byte 0 for the first
message; the header format puts magic byte 1 and the schema's GUID in the
``__key_schema_id`` / ``__value_schema_id`` header.
"""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import (
    _KEY_SCHEMA_ID,
    _VALUE_SCHEMA_ID,
    header_schema_id_serializer,
)
from confluent_kafka.schema_registry.common.serde import SchemaId
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    struct_pb2,
    timestamp_pb2,
)

from trafka.sdk.schemas import SchemaSerializationError
from trafka.sdk.schemas.framing import (
    FramingError,
    decode_indexes,
    guid_frame,
    header_name,
    id_frame,
    read_frame,
)
from trafka.sdk.schemas.proto_text import ProtoSyntaxError, parse_proto, render_proto
from trafka.sdk.schemas.protobuf import message_indexes
from trafka.sdk.schemas.types import SchemaRegistryError

INDEX_PATHS = [[0], [1], [0, 0], [3, 1, 2], [200], [0, 70000], [5, 0]]


@pytest.mark.parametrize("indexes", [None, *INDEX_PATHS])
@pytest.mark.parametrize("schema_id", [1, 255, 65536, 2**31 + 5])
def test_id_frames_are_confluents(schema_id: int, indexes: list[int] | None) -> None:
    ours = id_frame(schema_id, indexes)
    theirs = SchemaId("PROTOBUF" if indexes else "AVRO", schema_id, None, indexes).id_to_bytes()
    assert ours == theirs
    # and read back by each
    ref, pos = read_frame(ours + b"payload", indexes is not None)
    assert (ref.schema_id, ours[pos:] + b"payload"[:0]) == (schema_id, b"")
    back = SchemaId("PROTOBUF" if indexes else "AVRO")
    rest = back.from_bytes(io.BytesIO(ours + b"payload"))
    assert back.id == schema_id and rest.read() == b"payload"
    if indexes is not None:
        assert list(ref.indexes or ()) == back.message_indexes == indexes


@pytest.mark.parametrize("indexes", [None, *INDEX_PATHS])
def test_guid_header_frames_are_confluents(indexes: list[int] | None) -> None:
    guid = uuid.UUID("6f1c5a8e-2b7d-4c3e-9a10-0123456789ab")
    sid = SchemaId("PROTOBUF" if indexes else "AVRO", None, str(guid), indexes)
    headers: list[tuple[str, bytes]] = []
    ctx = SerializationContext("t", MessageField.VALUE, headers)
    assert header_schema_id_serializer(b"body", ctx, sid) == b"body"
    assert headers == [(header_name(False), guid_frame(guid, indexes))]
    assert (header_name(True), header_name(False)) == (_KEY_SCHEMA_ID, _VALUE_SCHEMA_ID)
    ref, _ = read_frame(headers[0][1], indexes is not None)
    assert ref.guid == guid and ref.schema_id is None


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "empty"),
        (b"\x00\x00\x00", "truncated"),
        (b"\x07\x00\x00\x00\x01", "unknown magic byte 7"),
        (b"\x01" + b"\x00" * 10, "GUID needs 17"),
    ],
)
def test_bad_frames_say_what_is_wrong(data: bytes, why: str) -> None:
    with pytest.raises(FramingError, match=why):
        read_frame(data, False)


def test_truncated_and_corrupt_message_indexes() -> None:
    with pytest.raises(FramingError, match="truncated"):
        read_frame(b"\x00\x00\x00\x00\x01\x04\x02", True)  # a count of 2, one index
    with pytest.raises(FramingError, match="not valid"):
        decode_indexes(b"\x01", 0)  # a count of -1
    with pytest.raises(FramingError, match="does not fit"):
        id_frame(2**32)


def test_errors_name_where_and_what() -> None:
    error = SchemaSerializationError(
        "unknown magic byte 3", topic="orders", partition=2, offset=17, is_key=True
    )
    assert str(error) == "key of topic 'orders', partition 2, offset 17: unknown magic byte 3"
    refused = SchemaRegistryError(404, 40403, "Schema 99 not found", "GET /schemas/ids/99")
    assert (refused.status, refused.error_code) == (404, 40403)
    assert "40403" in str(refused) and "Schema 99 not found" in str(refused)


def _pool_message(fdp: descriptor_pb2.FileDescriptorProto, name: str) -> type:
    pool = descriptor_pool.DescriptorPool()
    for dep in fdp.dependency:
        src = descriptor_pb2.FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(dep).CopyToProto(src)
        pool.Add(src)
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def test_rendered_proto_parses_back_to_the_same_wire_format() -> None:
    """descriptor.proto and struct.proto (protobuf's own: nested messages,
    enums, oneofs, maps, proto2 labels) rendered and parsed back build messages
    that read and write the same bytes as protobuf's compiled classes."""
    original = descriptor_pb2.FileDescriptorProto()
    descriptor_pb2.DESCRIPTOR.CopyToProto(original)
    back = parse_proto(render_proto(original), "d.proto")
    cls = _pool_message(back, "google.protobuf.FileDescriptorProto")
    sample = original.SerializeToString()
    assert cls.FromString(sample).SerializeToString() == sample
    struct_fdp = descriptor_pb2.FileDescriptorProto()
    struct_pb2.DESCRIPTOR.CopyToProto(struct_fdp)
    struct_back = parse_proto(render_proto(struct_fdp), "s.proto")
    scls = _pool_message(struct_back, "google.protobuf.Struct")
    value = struct_pb2.Struct()
    value.update({"a": 1.5, "b": [True, "x", None], "c": {"d": "e"}})
    data = value.SerializeToString(deterministic=True)
    assert scls.FromString(data).SerializeToString(deterministic=True) == data
    assert [f.name for f in back.message_type] == [f.name for f in original.message_type]


def test_proto3_optional_and_imports_parse() -> None:
    text = """
    syntax = "proto3";
    package shop.v1;
    import "google/protobuf/timestamp.proto";
    // a comment
    message Order {
      optional string note = 1;
      google.protobuf.Timestamp at = 2 [deprecated = true];
      map<string, int64> counts = 3;
      message Line { string sku = 1; }
      repeated Line lines = 4;
      Status status = 5;
      enum Status { NEW = 0; PAID = 1; }
    }
    """
    fdp = parse_proto(text, "order.proto")
    cls = _pool_message(fdp, "shop.v1.Order")
    order = cls(note="n", counts={"a": 2}, lines=[{"sku": "x"}], status=1)
    order.at.seconds = timestamp_pb2.Timestamp(seconds=5).seconds
    again = cls.FromString(order.SerializeToString())
    assert again.HasField("note") and again.lines[0].sku == "x" and again.at.seconds == 5
    # Line follows the map's entry type among Order's nested types, as protoc orders them.
    assert message_indexes(cls.Line.DESCRIPTOR) == (0, 1)
    with pytest.raises(ProtoSyntaxError, match="line 1"):
        parse_proto("message { }", "bad.proto")


PROTO_TEXTS = {
    "shop3.proto": """
syntax = "proto3";
package shop.v3;
import "google/protobuf/timestamp.proto";
option java_package = "com.example.shop";
message Order {
  reserved 9;
  string id = 1;
  optional string note = 2;
  map<string, int64> counts = 3;
  repeated Line lines = 4;
  message Line { string sku = 1; int32 qty = 2 [deprecated = true]; }
  oneof payment { string card = 5; Wallet wallet = 6; }
  Status status = 7;
  google.protobuf.Timestamp at = 8;
  enum Status { NEW = 0; PAID = 1; }
}
message Wallet { bytes token = 1; sint64 balance = 2; fixed32 f = 3; sfixed64 g = 4; double d = 5; }
enum Top { TOP_UNSPECIFIED = 0; TOP_ONE = 1; }
""",
    "legacy2.proto": """
syntax = "proto2";
package legacy;
message Item {
  required string name = 1;
  optional int32 size = 2 [default = 7];
  repeated uint64 ids = 3 [packed = true];
  optional Kind kind = 4;
  enum Kind { A = 1; B = 2; }
  extensions 100 to 199;
}
""",
}


def _shape(pool: Any, fdp: descriptor_pb2.FileDescriptorProto) -> dict[str, Any]:
    """What a file means for the wire: per message, each field's name, number,
    type, cardinality and presence, the type it names and its oneof."""
    fd = pool.Add(fdp)
    out: dict[str, Any] = {}

    def walk(message: Any) -> None:
        out[message.full_name] = [
            (
                f.name,
                f.number,
                f.type,
                f.is_repeated,
                f.is_required,
                f.has_presence,
                (f.message_type or f.enum_type).full_name
                if f.message_type or f.enum_type
                else None,
                f.containing_oneof.name if f.containing_oneof else None,
            )
            for f in message.fields
        ]
        for nested in message.nested_types:
            walk(nested)

    for message in fd.message_types_by_name.values():
        walk(message)
    for enum in fd.enum_types_by_name.values():
        out[enum.full_name] = [(v.name, v.number) for v in enum.values]
    return out


@pytest.mark.parametrize("name", sorted(PROTO_TEXTS))
def test_parsed_proto_means_what_protoc_says(tmp_path: Any, name: str) -> None:
    """protoc (grpcio-tools) is the reference for what .proto text means: our
    parser's descriptor builds the same messages, fields and enums, and so does
    the text we render from protoc's descriptor."""
    protoc = pytest.importorskip("grpc_tools.protoc")
    import grpc_tools

    (tmp_path / name).write_text(PROTO_TEXTS[name])
    out = tmp_path / "set.pb"
    include = str(Path(grpc_tools.__file__).parent / "_proto")
    assert (
        protoc.main(
            ["protoc", f"-I{tmp_path}", f"-I{include}", f"--descriptor_set_out={out}", name]
        )
        == 0
    )
    reference = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]

    def pool() -> Any:
        p = descriptor_pool.DescriptorPool()
        for dep in reference.dependency:
            src = descriptor_pb2.FileDescriptorProto()
            descriptor_pool.Default().FindFileByName(dep).CopyToProto(src)
            p.Add(src)
        return p

    expected = _shape(pool(), reference)
    assert _shape(pool(), parse_proto(PROTO_TEXTS[name], name)) == expected
    assert _shape(pool(), parse_proto(render_proto(reference), name)) == expected
