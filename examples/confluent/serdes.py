"""A schema-registry service: a ``SerializingProducer`` writes books as Avro,
Protobuf or JSON Schema (``--format``), registering the schema, and a
``DeserializingConsumer`` in a group reads them back as objects (the calls of
confluent-kafka's avro/protobuf/json producer and consumer examples).

    python examples/confluent/serdes.py --lib trafka -b localhost:9092 \
        -s http://localhost:8081 --format avro -t books -g shelf -n 6

Prints the delivery reports, the subject's latest version, and the books read
(sorted by partition and offset).
"""

from __future__ import annotations

import clientlib

AVRO_SCHEMA = """{
  "type": "record", "name": "Book", "namespace": "examples.library",
  "fields": [
    {"name": "title", "type": "string"},
    {"name": "year", "type": "int"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "isbn", "type": ["null", "string"], "default": null}
  ]
}"""

JSON_SCHEMA = """{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "title": "Book", "type": "object",
  "properties": {
    "title": {"type": "string"},
    "year": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "isbn": {"type": ["string", "null"]}
  },
  "required": ["title", "year", "tags"]
}"""


class Book:
    """What the service produces and reads: the application's own type."""

    def __init__(self, title, year, tags, isbn=None):
        self.title, self.year, self.tags, self.isbn = title, year, list(tags), isbn

    def row(self):
        return [self.title, self.year, self.tags, self.isbn]


def book_to_dict(book, ctx):
    return {"title": book.title, "year": book.year, "tags": book.tags, "isbn": book.isbn}


def dict_to_book(data, ctx):
    return None if data is None else Book(data["title"], data["year"], data["tags"], data["isbn"])


def protobuf_book_class():
    """The ``Book`` message class, built from its descriptor (what protoc's
    generated module would hold) so the example needs no generated file."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="examples/library/book.proto", package="examples.library", syntax="proto3"
    )
    message = proto.message_type.add(name="Book")
    message.field.add(name="title", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    message.field.add(name="year", number=2, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    message.field.add(name="tags", number=3, type=field.TYPE_STRING, label=field.LABEL_REPEATED)
    message.field.add(name="isbn", number=4, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    described = pool.Add(proto)
    return message_factory.GetMessageClass(described.message_types_by_name["Book"])


def serdes(lib, fmt, registry):
    """The value serializer and deserializer for ``fmt``, and how a book becomes
    what the serializer takes (and back)."""
    if fmt == "avro":
        avro = clientlib.module(lib, "schema_registry.avro")
        return (
            avro.AvroSerializer(registry, AVRO_SCHEMA, book_to_dict),
            avro.AvroDeserializer(registry, AVRO_SCHEMA, dict_to_book),
            lambda book: book,
            lambda value: value,
        )
    if fmt == "json":
        json_schema = clientlib.module(lib, "schema_registry.json_schema")
        return (
            json_schema.JSONSerializer(JSON_SCHEMA, registry, book_to_dict),
            json_schema.JSONDeserializer(JSON_SCHEMA, from_dict=dict_to_book),
            lambda book: book,
            lambda value: value,
        )
    protobuf = clientlib.module(lib, "schema_registry.protobuf")
    book_class = protobuf_book_class()
    return (
        protobuf.ProtobufSerializer(book_class, registry, {"use.deprecated.format": False}),
        protobuf.ProtobufDeserializer(book_class, {"use.deprecated.format": False}),
        lambda book: book_class(title=book.title, year=book.year, tags=book.tags, isbn=book.isbn),
        lambda msg: Book(msg.title, msg.year, msg.tags, msg.isbn or None),
    )


def main() -> None:
    cli = clientlib.parser("Avro, Protobuf or JSON Schema records through a schema registry")
    cli.add_argument("-s", dest="schema_registry", required=True, help="http://host:port")
    cli.add_argument("--format", choices=["avro", "protobuf", "json"], required=True)
    cli.add_argument("-t", dest="topic", required=True)
    cli.add_argument("-g", dest="group", required=True)
    cli.add_argument("-n", dest="count", type=int, default=6)
    args = cli.parse_args()
    ck = clientlib.module(args.lib)
    registry_module = clientlib.module(args.lib, "schema_registry")
    serialization = clientlib.module(args.lib, "serialization")

    with registry_module.SchemaRegistryClient({"url": args.schema_registry}) as registry:
        serializer, deserializer, to_value, from_value = serdes(args.lib, args.format, registry)
        producer = ck.SerializingProducer(
            {
                "bootstrap.servers": args.bootstrap_servers,
                "key.serializer": serialization.StringSerializer("utf_8"),
                "value.serializer": serializer,
            }
        )
        delivered = []

        def delivery_report(err, msg):
            if err is not None:
                delivered.append(["failed", str(err)])
            else:  # the key and value as written: the framed bytes
                delivered.append([msg.partition(), msg.offset(), msg.key(), msg.value()[:1]])

        for i in range(args.count):
            book = Book(
                f"Volume {i}", 1990 + i, ["kafka"] * (i % 3), f"isbn-{i}" if i % 2 else None
            )
            producer.produce(
                topic=args.topic,
                key=f"shelf-{i % 2}",
                value=to_value(book),
                on_delivery=delivery_report,
            )
            producer.poll(0.0)
        clientlib.emit("flushed", left=producer.flush(30))
        clientlib.emit("delivered", records=sorted(delivered))

        latest = registry.get_latest_version(f"{args.topic}-value")
        clientlib.emit(
            "registered",
            subject=latest.subject,
            version=latest.version,
            schema_type=latest.schema.schema_type,
        )

        consumer = ck.DeserializingConsumer(
            {
                "bootstrap.servers": args.bootstrap_servers,
                "group.id": args.group,
                "auto.offset.reset": "earliest",
                "key.deserializer": serialization.StringDeserializer("utf_8"),
                "value.deserializer": deserializer,
            }
        )
        consumer.subscribe([args.topic])
        books = []
        try:
            while len(books) < args.count:
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                if msg.error():
                    raise ck.KafkaException(msg.error())
                books.append(
                    [msg.partition(), msg.offset(), msg.key(), from_value(msg.value()).row()]
                )
        finally:
            consumer.close()
        clientlib.emit("books", records=sorted(books))
        by_hand = read_by_hand(ck, serialization, args, deserializer, from_value, delivered)
        clientlib.emit("books_by_hand", records=by_hand)


def read_by_hand(ck, serialization, args, deserializer, from_value, delivered):
    """The same records through a plain ``Consumer`` (``assign()``, no group
    offsets), deserialized by calling the deserializers with a
    ``SerializationContext``, as the newer examples do."""
    ends = {}
    for partition, offset, *_ in delivered:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    strings = serialization.StringDeserializer("utf_8")
    books = []
    with ck.Consumer(
        {"bootstrap.servers": args.bootstrap_servers, "group.id": args.group}
    ) as consumer:
        consumer.assign(
            [ck.TopicPartition(args.topic, p, ck.OFFSET_BEGINNING) for p in sorted(ends)]
        )
        while len(books) < args.count:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                raise ck.KafkaException(msg.error())
            key = strings(
                msg.key(),
                serialization.SerializationContext(msg.topic(), serialization.MessageField.KEY),
            )
            value = deserializer(
                msg.value(),
                serialization.SerializationContext(msg.topic(), serialization.MessageField.VALUE),
            )
            books.append([msg.partition(), msg.offset(), key, from_value(value).row()])
    return sorted(books)


if __name__ == "__main__":
    main()
