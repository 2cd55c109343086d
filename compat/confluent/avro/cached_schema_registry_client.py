"""confluent-kafka's legacy ``CachedSchemaRegistryClient``: Confluent's
Schema Registry REST API over ``requests``, with the ``avro`` package's parsed
schemas, for :class:`~trafka.compat.confluent.avro.AvroProducer` and
``AvroConsumer``.

Rules (confluent-kafka 2.16's, which services written for it rely on):

* The configuration is a dict: ``url`` (``http://`` or ``https://``, a trailing
  slash dropped, credentials in it taken for basic auth), ``ssl.ca.location``,
  ``ssl.certificate.location`` and ``ssl.key.location`` (both or neither),
  ``ssl.key.password``, ``basic.auth.credentials.source`` (``URL``,
  ``USER_INFO`` with ``basic.auth.user.info`` = ``user:password``, or
  ``SASL_INHERIT`` with ``sasl.username`` / ``sasl.password``, GSSAPI
  refused), ``auto.register.schemas``. Any other key is a ValueError. A
  string instead of the dict is the URL (deprecated, with a warning).
* What the registry said is cached: the id of each schema per subject, the
  schema of each id, the version of each schema per subject; ``register``,
  ``check_registration``, ``get_by_id`` and ``get_version`` answer from the
  cache when they can, ``get_latest_schema`` and ``get_by_version`` always ask.
* ``register`` and ``check_registration`` raise :class:`ClientError` on an
  error answer; the getters log it and answer None (``(None, None, None)``);
  ``test_compatibility`` answers False on any failure. A registry that cannot
  be reached raises ``requests``' own ``ConnectionError``.
"""

from __future__ import annotations

import json
import logging
import ssl
import warnings
from collections.abc import Mapping
from typing import Any

from requests import Session, utils
from requests.adapters import HTTPAdapter

from .error import ClientError
from .load import loads

__all__ = ["CachedSchemaRegistryClient"]

log = logging.getLogger(__name__)

VALID_LEVELS = ["NONE", "FULL", "FORWARD", "BACKWARD"]
VALID_METHODS = ["GET", "POST", "PUT", "DELETE"]
VALID_AUTH_PROVIDERS = ["URL", "USER_INFO", "SASL_INHERIT"]
ACCEPT_HDR = (
    "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"
)
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class _KeyPasswordAdapter(HTTPAdapter):
    """HTTPS with a client key that has a password (``requests`` alone has no
    place for one): the pools' TLS context, with the certificate chain loaded
    at the first request (as the files are read then without a password)."""

    def __init__(self, cert: str, key: str, password: str) -> None:
        self._chain: tuple[str, str, str] | None = (cert, key, password)
        self._context = ssl.create_default_context()
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["ssl_context"] = self._context
        super().init_poolmanager(*args, **kwargs)

    def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if self._chain is not None:
            self._context.load_cert_chain(*self._chain)
            self._chain = None
        return super().send(request, *args, **kwargs)


def _ok(code: int) -> bool:
    return 200 <= code <= 299


class CachedSchemaRegistryClient:
    """A Schema Registry client that caches what it learns (see the module).

    Args:
        url: the configuration dict (see the module), or (deprecated) the URL.
        max_schemas_per_subject: accepted for compatibility; not used.
        ca_location, cert_location, key_location: with a URL string only
            (deprecated): ``ssl.ca.location``... of the configuration.

    Raises:
        TypeError: the URL is not a string.
        ValueError: the URL is not http(s), an unknown key, a certificate
            without its key (or the reverse), an unknown credentials source.
    """

    def __init__(
        self,
        url: Any,
        max_schemas_per_subject: int = 1000,
        ca_location: str | None = None,
        cert_location: str | None = None,
        key_location: str | None = None,
    ) -> None:
        if isinstance(url, Mapping):
            conf = dict(url)
        else:
            warnings.warn(
                "CachedSchemaRegistryClient(url, ca_location, ...) is deprecated: pass a "
                "configuration dict ('url', 'ssl.ca.location', 'ssl.certificate.location', "
                "'ssl.key.location') instead",
                category=DeprecationWarning,
                stacklevel=2,
            )
            conf = {
                "url": url,
                "ssl.ca.location": ca_location,
                "ssl.certificate.location": cert_location,
                "ssl.key.location": key_location,
            }
        self.max_schemas_per_subject = max_schemas_per_subject
        raw_url = conf.pop("url", "")
        if not isinstance(raw_url, str):
            raise TypeError("URL must be of type str")
        if not raw_url.startswith("http"):
            raise ValueError("Invalid URL provided for Schema Registry")
        raw_url = raw_url.rstrip("/")
        # subject -> {schema: id}, id -> schema, subject -> {schema: version}
        self.subject_to_schema_ids: dict[str, dict[Any, int]] = {}
        self.id_to_schema: dict[int, Any] = {}
        self.subject_to_schema_versions: dict[str, dict[Any, int]] = {}
        session = Session()
        self._session = session
        ca = conf.pop("ssl.ca.location", None)
        if ca is not None:
            session.verify = ca
        # Given with each request: requests prefers REQUESTS_CA_BUNDLE to the session's.
        self._verify: Any = session.verify
        cert = _client_cert(conf)
        auth = _basic_auth(raw_url, conf)
        # (no credentials: no Authorization header, rather than an empty one)
        session.auth = auth if any(auth) else None
        password = conf.pop("ssl.key.password", None)
        if password and cert[0] and cert[1]:
            session.mount("https://", _KeyPasswordAdapter(cert[0], cert[1], password))
        else:
            session.cert = cert
        self.auto_register_schemas = conf.pop("auto.register.schemas", True)
        if conf:
            raise ValueError(f"Unrecognized configuration properties: {conf.keys()}")
        self.url: str = utils.urldefragauth(raw_url)

    def __enter__(self) -> CachedSchemaRegistryClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP connections (the client may still be used: they reopen)."""
        session = getattr(self, "_session", None)  # (None: __init__ failed first)
        if session is not None:
            session.close()

    def _send_request(
        self, url: str, method: str = "GET", body: Any = None, headers: Any = None
    ) -> tuple[Any, int]:
        """The answer's JSON (or its bytes where it is not JSON) and status."""
        if method not in VALID_METHODS:
            raise ClientError(f"Method {method} is invalid; valid methods include {VALID_METHODS}")
        sent = {"Accept": ACCEPT_HDR}
        data = None
        if body:
            data = json.dumps(body).encode()
            sent["Content-Type"] = _CONTENT_TYPE
        sent.update(headers or {})
        response = self._session.request(method, url, headers=sent, data=data, verify=self._verify)
        try:
            return response.json(), response.status_code
        except ValueError:  # (a proxy's or the server's own page, not the registry's JSON)
            return response.content, response.status_code

    def _cache_schema(
        self, schema: Any, schema_id: int, subject: str | None = None, version: int | None = None
    ) -> Any:
        """Remember ``schema`` as ``schema_id`` (an id keeps its first schema
        object, which is returned) and under ``subject``."""
        schema = self.id_to_schema.setdefault(schema_id, schema)
        if subject:
            self.subject_to_schema_ids.setdefault(subject, {})[schema] = schema_id
            if version is not None:
                self.subject_to_schema_versions.setdefault(subject, {})[schema] = version
        return schema

    def _path(self, *parts: Any) -> str:
        return "/".join([self.url, *map(str, parts)])

    def register(self, subject: str, avro_schema: Any) -> int:
        """``POST /subjects/{subject}/versions``: the id of ``avro_schema``
        registered under ``subject`` (the cached id when it was before).

        Raises:
            ClientError: the registry refused it (401/403, 409 incompatible,
                422 invalid, any other error status).
        """
        cached = self.subject_to_schema_ids.get(subject, {}).get(avro_schema)
        if cached is not None:
            return cached
        url = self._path("subjects", subject, "versions")
        result, code = self._send_request(url, "POST", {"schema": str(avro_schema)})
        if code in (401, 403):
            what = "Unauthorized access. Error code:"
        elif code == 409:
            what = "Incompatible Avro schema:"
        elif code == 422:
            what = "Invalid Avro schema:"
        elif not _ok(code):
            what = "Unable to register schema. Error code:"
        else:
            schema_id: int = result["id"]
            self._cache_schema(avro_schema, schema_id, subject)
            return schema_id
        raise ClientError(f"{what}{code} message:{result}", code)

    def check_registration(self, subject: str, avro_schema: Any) -> int:
        """``POST /subjects/{subject}``: the id of ``avro_schema`` if it is
        registered under ``subject``.

        Raises:
            ClientError: it is not (404), or another error answer.
        """
        cached = self.subject_to_schema_ids.get(subject, {}).get(avro_schema)
        if cached is not None:
            return cached
        url = self._path("subjects", subject)
        result, code = self._send_request(url, "POST", {"schema": str(avro_schema)})
        if code in (401, 403):
            raise ClientError(f"Unauthorized access. Error code:{code}", code)
        if code == 404:
            raise ClientError(f"Schema or subject not found:{code}", code)
        if not _ok(code):
            raise ClientError(f"Unable to check schema registration. Error code:{code}", code)
        schema_id: int = result["id"]
        self._cache_schema(avro_schema, schema_id, subject)
        return schema_id

    def delete_subject(self, subject: str) -> Any:
        """``DELETE /subjects/{subject}``: the versions it had (the registry's answer).

        Raises:
            ClientError: an error answer.
        """
        result, code = self._send_request(self._path("subjects", subject), "DELETE")
        if not _ok(code):
            raise ClientError(f"Unable to delete subject: {result}", code)
        return result

    def get_by_id(self, schema_id: int) -> Any:
        """``GET /schemas/ids/{id}``: the schema, or None (logged) when the
        registry has none or answers an error.

        Raises:
            ClientError: the registry's schema does not parse.
        """
        if schema_id in self.id_to_schema:
            return self.id_to_schema[schema_id]
        result, code = self._send_request(self._path("schemas", "ids", schema_id))
        if code == 404:
            log.error("Schema not found:%s", code)
            return None
        if not _ok(code):
            log.error("Unable to get schema for the specific ID:%s", code)
            return None
        try:
            schema = loads(result.get("schema"))
        except ClientError as exc:
            raise ClientError(
                f"Received bad schema (id {schema_id}) from registry: {exc}"
            ) from None
        return self._cache_schema(schema, schema_id)

    def get_latest_schema(self, subject: str) -> tuple[Any, Any, Any]:
        """``(schema_id, schema, version)`` of the subject's latest version
        (see :meth:`get_by_version`)."""
        return self.get_by_version(subject, "latest")

    def get_by_version(self, subject: str, version: Any) -> tuple[Any, Any, Any]:
        """``GET /subjects/{subject}/versions/{version}``: ``(schema_id,
        schema, version)``, or ``(None, None, None)`` on an error answer."""
        result, code = self._send_request(self._path("subjects", subject, "versions", version))
        if code == 404:
            log.error("Schema not found:%s", code)
        elif code == 422:
            log.error("Invalid version:%s", code)
        if not _ok(code):
            return (None, None, None)
        schema_id = result["id"]
        found = result["version"]
        schema = self.id_to_schema.get(schema_id)
        if schema is None:
            schema = loads(result["schema"])
        schema = self._cache_schema(schema, schema_id, subject, found)
        return (schema_id, schema, found)

    def get_version(self, subject: str, avro_schema: Any) -> int | None:
        """``POST /subjects/{subject}``: the version of ``avro_schema`` under
        ``subject``, or None (logged) when it is not there."""
        cached = self.subject_to_schema_versions.get(subject, {}).get(avro_schema)
        if cached is not None:
            return cached
        url = self._path("subjects", subject)
        result, code = self._send_request(url, "POST", {"schema": str(avro_schema)})
        if code == 404:
            log.error("Not found:%s", code)
            return None
        if not _ok(code):
            log.error("Unable to get version of a schema:%s", code)
            return None
        version: int = result["version"]
        self._cache_schema(avro_schema, result["id"], subject, version)
        return version

    def test_compatibility(self, subject: str, avro_schema: Any, version: Any = "latest") -> bool:
        """``POST /compatibility/subjects/{subject}/versions/{version}``: whether
        ``avro_schema`` may follow that version; False (logged) on any failure,
        the registry unreachable included."""
        url = self._path("compatibility", "subjects", subject, "versions", version)
        try:
            result, code = self._send_request(url, "POST", {"schema": str(avro_schema)})
        except Exception as exc:
            log.error("_send_request() failed: %s", exc)
            return False
        if code == 404:
            log.error("Subject or version not found:%s", code)
        elif code == 422:
            log.error("Invalid subject or schema:%s", code)
        elif _ok(code):
            return result.get("is_compatible")  # type: ignore[no-any-return]
        else:
            log.error("Unable to check the compatibility: %s", code)
        return False

    def update_compatibility(self, level: str, subject: str | None = None) -> str:
        """``PUT /config[/{subject}]``: set the compatibility level (``NONE``,
        ``FULL``, ``FORWARD`` or ``BACKWARD``) and return it.

        Raises:
            ClientError: another level, or an error answer.
        """
        if level not in VALID_LEVELS:
            raise ClientError(f"Invalid level specified: {level}")
        url = self._path("config", subject) if subject else self._path("config")
        result, code = self._send_request(url, "PUT", {"compatibility": level})
        if not _ok(code):
            raise ClientError(f"Unable to update level: {level}. Error code: {code}", code)
        return result["compatibility"]  # type: ignore[no-any-return]

    def get_compatibility(self, subject: str | None = None) -> str:
        """``GET /config[/{subject}]``: the compatibility level.

        Raises:
            ClientError: an error answer, or a level not one of :data:`VALID_LEVELS`.
        """
        url = self._path("config", subject) if subject else self._path("config")
        result, code = self._send_request(url)
        if not _ok(code):
            raise ClientError(f"Unable to fetch compatibility level. Error code: {code}", code)
        level = result.get("compatibilityLevel")
        if level not in VALID_LEVELS:
            shown = "No compatibility was returned" if level is None else str(level)
            raise ClientError(f"Invalid compatibility level received: {shown}")
        return level  # type: ignore[no-any-return]


def _client_cert(conf: dict[str, Any]) -> tuple[Any, Any]:
    cert = conf.pop("ssl.certificate.location", None), conf.pop("ssl.key.location", None)
    if bool(cert[0]) != bool(cert[1]):
        raise ValueError(
            "Both schema.registry.ssl.certificate.location and "
            "schema.registry.ssl.key.location must be set"
        )
    return cert


def _basic_auth(url: str, conf: dict[str, Any]) -> tuple[str, str]:
    source = str(conf.pop("basic.auth.credentials.source", "URL")).upper()
    if source not in VALID_AUTH_PROVIDERS:
        raise ValueError(
            f"schema.registry.basic.auth.credentials.source must be one of {VALID_AUTH_PROVIDERS}"
        )
    if source == "SASL_INHERIT":
        if str(conf.pop("sasl.mechanism", "")).upper() == "GSSAPI":
            raise ValueError("SASL_INHERIT does not support SASL mechanism GSSAPI")
        return (conf.pop("sasl.username", ""), conf.pop("sasl.password", ""))
    if source == "USER_INFO":
        user, _, password = str(conf.pop("basic.auth.user.info", "")).partition(":")
        return (user, password)
    user, password = utils.get_auth_from_url(url)
    return (user, password)
