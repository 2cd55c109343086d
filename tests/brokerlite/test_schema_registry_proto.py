"""The registry's .proto reader against protoc itself (grpcio-tools' bundled
compiler): the ``FileDescriptorProto`` it serves for ``format=serialized`` has
the messages, nesting, fields (names, numbers, labels, types, type names,
oneofs), maps and enums protoc gives for the same text.

protoc is the reference for what a .proto file means (protobuf's language
guide, https://protobuf.dev/programming-guides/proto3/); confluent-kafka's
ProtobufDeserializer reads the writer's schema from this descriptor.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

protoc = pytest.importorskip("grpc_tools.protoc")

from google.protobuf import descriptor_pb2  # noqa: E402

from trafka.brokerlite.registry.proto import serialized  # noqa: E402

COMMON = """
syntax = "proto3";
package shop.v1;
message Money { int64 units = 1; int32 nanos = 2; }
enum Currency { CURRENCY_UNSPECIFIED = 0; EUR = 1; USD = 2; }
"""

FILES = {
    "nested.proto": """
syntax = "proto3";
package shop.v1;
// Comments, options and reserved ranges are read past.
option java_package = "com.example.shop";
message Order {
  reserved 9, 10 to 12;
  reserved "legacy";
  string id = 1 [json_name = "orderId"];
  Status status = 2;
  map<string, Line> lines = 3;
  map<int32, string> notes = 4;
  oneof payment { string card = 5; int64 voucher = 6; Line.Kind kind = 7; }
  repeated Line history = 8;
  message Line {
    string sku = 1;
    repeated int32 qty = 2 [packed = true];
    enum Kind { KIND_UNSPECIFIED = 0; GOODS = 1; SERVICE = 2; }
    Kind kind = 3;
  }
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; }
}
message Empty {}
service Orders { rpc Get (Order) returns (Order); }
""",
    "proto2.proto": """
syntax = "proto2";
package legacy;
message Item {
  required string id = 1;
  optional int32 count = 2 [default = 1];
  repeated bytes blobs = 3;
  extensions 100 to 199;
}
""",
    "imports.proto": """
syntax = "proto3";
package shop.v1;
import "common.proto";
message Priced { Money price = 1; Currency currency = 2; .shop.v1.Money tax = 3; }
""",
}


def shape(messages: Any, enums: Any) -> dict[str, Any]:
    """What the two descriptors must agree on."""
    out: dict[str, Any] = {}
    for message in messages:
        out[message.name] = {
            "map_entry": message.options.map_entry,
            "oneofs": [o.name for o in message.oneof_decl],
            "fields": [
                (
                    f.name,
                    f.number,
                    f.label,
                    f.type,
                    f.type_name,
                    f.oneof_index if f.HasField("oneof_index") else None,
                )
                for f in message.field
            ],
            "nested": shape(message.nested_type, message.enum_type),
        }
    for enum in enums:
        out[enum.name] = [(v.name, v.number) for v in enum.value]
    return out


@pytest.mark.compat("Schema Registry", "compatibility levels: Avro, JSON Schema, Protobuf rules")
@pytest.mark.parametrize("name", sorted(FILES))
def test_served_descriptor_matches_protoc(tmp_path: Path, name: str) -> None:
    (tmp_path / "common.proto").write_text(COMMON)
    (tmp_path / name).write_text(FILES[name])
    out = tmp_path / "set.pb"
    assert protoc.main(["protoc", f"-I{tmp_path}", f"--descriptor_set_out={out}", name]) == 0
    expected = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    imported = [COMMON] if "import" in FILES[name] else []
    ours = descriptor_pb2.FileDescriptorProto.FromString(
        base64.b64decode(serialized(FILES[name], name, imported))
    )
    assert (ours.package, ours.syntax or "proto2", list(ours.dependency)) == (
        expected.package, expected.syntax or "proto2", list(expected.dependency)
    )  # fmt: skip
    assert shape(ours.message_type, ours.enum_type) == shape(
        expected.message_type, expected.enum_type
    )
