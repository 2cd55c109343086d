"""confluent-kafka's ``confluent_kafka.schema_registry.common.json_schema``: what
the sync and async JSON Schema serdes share, and the walk of field rules over
a JSON value.

The walk (field rules: CEL_FIELD...): an object's ``properties`` are its
fields, entered by their path (``$.address.city``) with their
``confluent:tags``; ``items`` walk an array; ``allOf`` walks each subschema,
``anyOf`` each the value is valid against, ``oneOf`` the first; a list of
``type`` s the first the value is; ``$ref`` is followed through the schema's
references. A field rule's leaf gets each scalar (or an enum) whose tags meet
the rule's (every field for a rule without tags).
"""

from __future__ import annotations

from typing import Any

__all__ = ["JsonMessage", "JsonSchema", "field_transformer", "get_type", "transform"]

JsonMessage = Any
JsonSchema = Any

_TYPES = {
    "array": "ARRAY",
    "string": "STRING",
    "integer": "INT",
    "number": "DOUBLE",
    "boolean": "BOOLEAN",
    "null": "NULL",
}


def get_type(schema: Any) -> Any:
    """The :class:`~.serde.FieldType` of a JSON Schema."""
    from .serde import FieldType

    if isinstance(schema, bool):
        return FieldType.COMBINED
    if schema.get("const") is not None or schema.get("enum") is not None:
        return FieldType.ENUM
    kind = schema.get("type")
    if kind == "object":
        return FieldType.RECORD if schema.get("properties") else FieldType.MAP
    if isinstance(kind, str) and kind in _TYPES:
        return FieldType(_TYPES[kind])
    return FieldType.RECORD if schema.get("properties") is not None else FieldType.NULL


class _Walk:
    """One field rule's walk over one message (the resolver follows ``$ref``)."""

    def __init__(self, ctx: Any, field_transform: Any, resolver: Any) -> None:
        self.ctx = ctx
        self.field_transform = field_transform
        self.resolver = resolver

    def valid(self, schema: Any, message: Any, resolver: Any) -> bool:
        import jsonschema

        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
        try:
            return bool(cls(schema, _resolver=resolver).is_valid(message))
        except Exception:
            return False

    def first_valid(self, schemas: list[Any], message: Any, resolver: Any) -> tuple[Any, Any]:
        for sub in schemas:
            if not isinstance(sub, dict):
                continue
            sub, sub_resolver = self.follow(sub, resolver)
            if self.valid(sub, message, sub_resolver):
                return sub, sub_resolver
        return None, resolver

    def follow(self, schema: Any, resolver: Any) -> tuple[Any, Any]:
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        if ref is None:
            return schema, resolver
        found = resolver.lookup(ref)
        return found.contents, found.resolver

    def run(self, schema: Any, message: Any, path: str, resolver: Any) -> Any:
        if message is None or schema is None or isinstance(schema, bool):
            return message
        field = self.ctx.current_field()
        if field is not None:
            field.field_type = get_type(schema)
        kinds = schema.get("type")
        if isinstance(kinds, list) and kinds:
            for kind in kinds:
                narrowed = {**schema, "type": kind}
                if self.valid(narrowed, message, resolver):
                    return self.run(narrowed, message, path, resolver)
        if "allOf" in schema or "anyOf" in schema or "oneOf" in schema:
            if "allOf" in schema:
                for sub in schema["allOf"]:
                    message = self.run(sub, message, path, resolver)
            elif "oneOf" in schema:
                sub, sub_resolver = self.first_valid(schema["oneOf"], message, resolver)
                if sub is not None:
                    message = self.run(sub, message, path, sub_resolver)
            else:
                for sub in schema["anyOf"]:  # every one the value is valid against
                    sub, sub_resolver = self.first_valid([sub], message, resolver)
                    if sub is not None:
                        message = self.run(sub, message, path, sub_resolver)
            return self.fields(schema, message, path, resolver)
        if "items" in schema and isinstance(message, list):
            return [self.run(schema["items"], v, path, resolver) for v in message]
        if "$ref" in schema:
            sub, sub_resolver = self.follow(schema, resolver)
            return self.run(sub, message, path, sub_resolver)
        if str(get_type(schema).value) == "RECORD":
            return self.fields(schema, message, path, resolver)
        if field is not None:
            rule_tags = set(getattr(self.ctx.rule, "tags", None) or ())
            if not rule_tags or rule_tags & field.tags:
                return self.field_transform(self.ctx, field, message)
        return message

    def fields(self, schema: Any, message: Any, path: str, resolver: Any) -> Any:
        from .serde import RuleConditionError

        props = schema.get("properties")
        if not isinstance(props, dict) or not isinstance(message, dict):
            return message
        for name, sub in props.items():
            if not isinstance(sub, dict):
                continue
            full = f"{path}.{name}"
            self.ctx.enter_field(message, full, name, get_type(sub), sub.get("confluent:tags"))
            try:
                value = message.get(name)
                if value is None:
                    continue
                value = self.run(sub, value, full, resolver)
                if (
                    str(getattr(self.ctx.rule.kind, "value", self.ctx.rule.kind)).upper()
                    == "CONDITION"
                ):
                    if value is False:
                        raise RuleConditionError(self.ctx.rule)
                else:
                    message[name] = value
            finally:
                self.ctx.exit_field()
        return message


def transform(
    ctx: Any, schema: Any, resolver: Any, path: str, message: Any, field_transform: Any
) -> Any:
    """``message`` after a field rule (see the module doc); ``resolver`` (a
    ``referencing`` resolver rooted at the schema) follows ``$ref``."""
    return _Walk(ctx, field_transform, resolver).run(schema, message, path, resolver)


def field_transformer(doc: Any, referenced: list[tuple[str, str]]) -> Any:
    """The walk of :func:`transform` over values of the schema ``doc`` (parsed),
    whose references are ``referenced`` (``(the URL $ref names, its text)``)."""
    import json

    import referencing
    import referencing.jsonschema

    draft = referencing.jsonschema.DRAFT7
    registry = referencing.Registry().with_resources(
        (name, referencing.Resource.from_contents(json.loads(text), default_specification=draft))
        for name, text in referenced
    )
    root = referencing.Resource.from_contents(doc, default_specification=draft)
    resolver = registry.resolver_with_root(root)

    def walk(ctx: Any, field_transform: Any, message: Any) -> Any:
        return transform(ctx, doc, resolver, "$", message, field_transform)

    return walk
