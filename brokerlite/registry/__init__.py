"""A Schema Registry inside brokerlite: Confluent's REST API, schemas kept in a
compacted ``_schemas`` topic (``trafka broker --schema-registry-listen``).

* :mod:`.store`: the state and the topic's records (keys, values, the rules
  that make every node agree);
* :mod:`.api`, :mod:`.reads`: the REST API over the state, without HTTP;
* :mod:`.formats`: the schema types (parsing, identity); :mod:`.avro_compat`,
  :mod:`.json_compat`, :mod:`.proto`: compatibility rules;
* :mod:`.service`: the driver (HTTP listener, the topic through the SDK).

Parsing needs the ``schemas`` extra (fastavro, jsonschema, protobuf): :func:`missing`
says what is absent; nothing here is imported unless the registry is enabled.
"""

from .formats import missing

__all__ = ["missing"]
