"""A Schema Registry for the console's pages: registry-framed keys and values
decoded in the message browser and the search, and the subjects pages.

Rules:

* A cluster's console knows a registry when it is given one
  (``trafka console --schema-registry URL``, or brokerlite's own when the
  broker serves one beside its console). Without one, nothing here runs and
  the pages show bytes as before.
* A key or value is decoded when it is a frame (magic byte 0 and a schema
  id, or the id in the ``__key_schema_id`` / ``__value_schema_id`` header)
  and is shown ``auto`` or ``json``: as the JSON of its decoded value, with the
  schema's type, id and subject beside it. A frame that does not decode (a
  schema id the registry does not know, a payload that does not match) is
  shown as bytes, with why it did not decode: the page never claims a
  decoding it did not make. Bytes that are not a frame are shown as bytes.
* Decoding asks the registry once per schema id (the SDK's caches); that
  request holds the page's event loop for its time, as the SDK's
  deserializers do in an async client.
* A search matches a decoded key or value by its JSON text (substring,
  regex) or its decoded fields (a JSON path), not by its bytes.
* The subjects pages read the registry with the async client: subjects with
  their versions and compatibility level (their own, or the global one),
  and one subject's versions with a unified diff between two of them.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from typing import Any
from urllib.parse import quote

from .model.messages import MessageRow, Rendered

__all__ = ["SchemaRegistryView"]


def _pretty(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


class SchemaRegistryView:
    """One cluster's registry, at ``url``.

    Args:
        url: the registry's base URL.
        timeout: seconds per request (a page must not wait long for it).
    """

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = url
        self.timeout = timeout
        self._decoder: Any = None
        self._registry: Any = None

    def _settings(self) -> dict[str, Any]:
        return {"url": self.url, "timeout": self.timeout, "max.retries": 0}

    def close(self) -> None:
        if self._registry is not None:
            self._registry.close()
            self._registry = None

    # -- decoding --------------------------------------------------------------------------

    def decode(self, data: bytes | None, record: Any, is_key: bool) -> tuple[Any, str] | None:
        """``(decoded JSON value, what schema)`` of a framed key or value; None
        when ``data`` is no frame. A frame that does not decode: ``(None, why)``."""
        header = "__key_schema_id" if is_key else "__value_schema_id"
        framed = data is not None and len(data) >= 5 and data[0] == 0
        if data is None or not (framed or any(k == header for k, _ in record.headers)):
            return None
        from trafka.sdk.schemas import SchemaSerializationError

        if self._decoder is None:
            from trafka.sdk.schemas import SchemaRegistryClient
            from trafka.sdk.schemas.decoded import DecodingDeserializer

            self._registry = SchemaRegistryClient(self._settings())
            self._decoder = DecodingDeserializer(self._registry)
        try:
            decoded = self._decoder.deserialize_record(
                data, record.topic, record.partition, record.offset, record.headers, is_key
            )
        except SchemaSerializationError as exc:
            return None, f"not decoded: {exc.reason}"
        what = f"{decoded.schema_type}, schema id {decoded.schema_id}"
        if decoded.subject:
            what += f", subject {decoded.subject}"
        return decoded.value, what

    def _rendered(self, data: bytes | None, record: Any, is_key: bool, shown: Rendered) -> Rendered:
        got = self.decode(data, record, is_key)
        if got is None:
            return shown
        value, what = got
        if value is None and what.startswith("not decoded"):
            return dataclasses.replace(shown, schema=what)
        pretty = json.dumps(value, indent=2, ensure_ascii=False)
        return Rendered("json", pretty, len(data or b""), schema=what)

    def decoded_row(self, row: MessageRow, record: Any) -> MessageRow:
        """``row`` with its framed key and value shown decoded."""
        return dataclasses.replace(
            row,
            key=self._rendered(record.key, record, True, row.key),
            value=self._rendered(record.value, record, False, row.value),
        )

    def searchable(self, data: bytes | None, record: Any, is_key: bool) -> bytes | None:
        """What a search matches of a key or value: a decoded one's JSON, else its bytes."""
        got = self.decode(data, record, is_key)
        if got is None or (got[0] is None and got[1].startswith("not decoded")):
            return data
        return json.dumps(got[0], ensure_ascii=False).encode("utf-8")

    # -- the subjects pages --------------------------------------------------------------------

    async def subjects(self) -> dict[str, Any]:
        """Every subject with its versions and compatibility level, and the global level."""
        from trafka.sdk.schemas import open_schema_registry

        async with open_schema_registry(self._settings()) as registry:
            top = (await registry.request("GET", "/config"))["compatibilityLevel"]
            rows = []
            for subject in sorted(await registry.get_subjects()):
                versions = await registry.get_versions(subject)
                level = await _own_level(registry, subject)
                rows.append({"subject": subject, "versions": versions, "level": level})
        return {"global_level": top, "subjects": rows, "url": self.url}

    async def subject(self, subject: str, a: int | None, b: int | None) -> dict[str, Any]:
        """A subject's versions (id, type, schema), its level, and the diff of
        version ``a`` to ``b`` (default: the one before the latest, to the latest)."""
        from trafka.sdk.schemas import open_schema_registry

        async with open_schema_registry(self._settings()) as registry:
            numbers = await registry.get_versions(subject)
            versions = [await registry.get_version(subject, n) for n in numbers]
            level = await _own_level(registry, subject)
            top = (await registry.request("GET", "/config"))["compatibilityLevel"]
        by_number = {v.version: v for v in versions}
        b = b if b in by_number else numbers[-1]
        a = a if a in by_number else (numbers[-2] if len(numbers) > 1 else b)
        diff = "\n".join(
            difflib.unified_diff(
                _pretty(by_number[a].schema.schema_str).splitlines(),
                _pretty(by_number[b].schema.schema_str).splitlines(),
                f"version {a}",
                f"version {b}",
                lineterm="",
            )
        )
        return {
            "subject": subject,
            "versions": [
                {
                    "version": v.version,
                    "id": v.schema_id,
                    "type": v.schema.schema_type,
                    "text": _pretty(v.schema.schema_str),
                }
                for v in versions
            ],
            "level": level,
            "global_level": top,
            "a": a,
            "b": b,
            "diff": diff,
        }


async def _own_level(registry: Any, subject: str) -> str | None:
    """The subject's own compatibility level; None when the global one applies."""
    from trafka.sdk.schemas import SchemaRegistryError

    try:
        body = await registry.request("GET", f"/config/{quote(subject, safe='')}")
    except SchemaRegistryError as exc:
        if exc.error_code == 40408:
            return None
        raise
    return str(body["compatibilityLevel"])
