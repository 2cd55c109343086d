"""The registry client against brokerlite's registry (Confluent's REST API):
every call, its errors carrying the registry's ``error_code``, retries through
a relay that drops connections, TLS with a client certificate and basic or
bearer credentials as they go on the wire (read by a relay in front of the
registry), and what a client is told by a server answering 5xx or garbage.
"""

from __future__ import annotations

import base64
import http.server
import json
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import trustme
from schema_relay import Relay
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.sdk.schemas import (
    AvroSerializer,
    Schema,
    SchemaRegistryClient,
    SchemaRegistryError,
    SchemaSerializationError,
    open_schema_registry,
)

USER = json.dumps(
    {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
)
USER_V2 = json.dumps(
    {
        "type": "record",
        "name": "User",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "age", "type": "int", "default": 0},
        ],
    }
)
USER_BAD = json.dumps(
    {"type": "record", "name": "User", "fields": [{"name": "age", "type": "int"}]}
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(
        tmp_path_factory, "schemas-client", schema_registry_listen="127.0.0.1:0"
    )


@pytest.fixture(scope="module")
def address(broker: RunningBroker) -> tuple[str, int]:
    assert broker.schema_registry_address is not None
    return broker.schema_registry_address


async def _every_call(url: str) -> None:
    subject = fresh("calls-value")
    async with open_schema_registry({"url": url}) as client:
        first = await client.register_schema(subject, Schema(USER))
        assert (await client.get_schema(first.schema_id)).schema_str
        assert (await client.lookup_schema(subject, Schema(USER))).version == 1
        assert await client.test_compatibility(subject, Schema(USER_V2))
        assert not await client.test_compatibility(subject, Schema(USER_BAD))
        second = await client.register_schema(subject, Schema(USER_V2))
        assert second.schema_id != first.schema_id
        assert await client.get_versions(subject) == [1, 2]
        latest = await client.get_latest_version(subject)
        assert (latest.version, latest.schema_id) == (2, second.schema_id)
        assert (await client.get_version(subject, 1)).schema_id == first.schema_id
        assert subject in await client.get_subjects()
        assert await client.set_compatibility("FORWARD", subject) == "FORWARD"
        assert await client.get_compatibility(subject) == "FORWARD"
        with pytest.raises(SchemaRegistryError) as caught:
            await client.register_schema(subject, Schema(USER_BAD))
        assert (caught.value.status, caught.value.error_code) == (409, 409)
        assert await client.delete_subject(subject) == [1, 2]
        with pytest.raises(SchemaRegistryError) as missing:
            await client.get_versions(subject)
        assert missing.value.error_code == 40401 and "GET /subjects/" in str(missing.value)
        with pytest.raises(SchemaRegistryError) as unknown:
            await client.get_schema(2_000_000_000)
        assert unknown.value.error_code == 40403


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_every_call_and_its_errors(address: tuple[str, int], backend: str) -> None:
    """Confluent's API reference (Schema Registry API): register, get by id,
    lookup, versions, latest, compatibility test, config, delete; 40401 subject
    not found, 40403 schema not found, 409 incompatible."""
    url = f"http://{address[0]}:{address[1]}"
    anyio.run(_every_call, url, backend=backend)


def test_connection_errors_are_retried_with_backoff_then_reported(address: tuple[str, int]) -> None:
    relay = Relay(address, drop=2)
    try:
        conf = {"url": f"http://127.0.0.1:{relay.port}", "retries.wait.ms": 1, "max.retries": 3}
        with SchemaRegistryClient(conf) as client:
            client.get_subjects()
            assert client.requests == 3  # two dropped, the third answered
        relay.drop = 5
        conf["max.retries"] = 1
        with SchemaRegistryClient(conf) as client:
            with pytest.raises(SchemaRegistryError) as caught:
                client.get_subjects()
            assert caught.value.status is None and client.requests == 2
            assert "unreachable" in str(caught.value)
    finally:
        relay.close()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    client = ca.issue_cert("client@example")
    d = tmp_path_factory.mktemp("tls")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    client.cert_chain_pems[0].write_to_path(str(d / "client.pem"))
    client.private_key_pem.write_to_path(str(d / "client.key"))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.configure_cert(ctx)
    ca.configure_trust(ctx)
    ctx.verify_mode = ssl.CERT_REQUIRED  # the client must show its certificate
    return {"ctx": ctx, "dir": d}


@pytest.mark.parametrize(
    ("auth", "header"),
    [
        (
            {"basic.auth.user.info": "alice:s3cret"},
            "Basic " + base64.b64encode(b"alice:s3cret").decode(),
        ),
        ({"basic.auth.credentials.source": "URL"}, "Basic " + base64.b64encode(b"bob:pw").decode()),
        (
            {"bearer.auth.credentials.source": "STATIC_TOKEN", "bearer.auth.token": "tok-1"},
            "Bearer tok-1",
        ),
    ],
)
def test_tls_with_client_certificate_and_credentials_on_the_wire(
    address: tuple[str, int], tls: dict[str, Any], auth: dict[str, str], header: str
) -> None:
    """RFC 7617 (Basic: base64 of user:password) and RFC 6750 (Bearer), over TLS
    verified against the CA, with the client's certificate."""
    relay = Relay(address, tls=tls["ctx"])
    d: Path = tls["dir"]
    user = "bob:pw@" if auth.get("basic.auth.credentials.source") == "URL" else ""
    conf = {
        "url": f"https://{user}127.0.0.1:{relay.port}",
        "ssl.ca.location": str(d / "ca.pem"),
        "ssl.certificate.location": str(d / "client.pem"),
        "ssl.key.location": str(d / "client.key"),
        **auth,
    }
    try:
        with SchemaRegistryClient(conf) as client:
            assert isinstance(client.get_subjects(), list)
        assert f"Authorization: {header}\r\n".lower().encode() in bytes(relay.sent).lower()
        untrusted = {k: v for k, v in conf.items() if k != "ssl.ca.location"} | {"max.retries": 0}
        with (
            SchemaRegistryClient(untrusted) as client,
            pytest.raises(SchemaRegistryError, match="CERTIFICATE_VERIFY_FAILED"),
        ):
            client.get_subjects()
    finally:
        relay.close()


class _Faulty(http.server.BaseHTTPRequestHandler):
    """Not a registry: a server answering 503 or garbage, for what a client is told."""

    def do_GET(self) -> None:
        if self.path.startswith("/subjects"):
            body = b'{"error_code": 50301, "message": "store unavailable"}'
            self.send_response(503)
        else:
            body = b"<html>proxy error</html>"
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_5xx_is_retried_and_garbage_is_named() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Faulty)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with SchemaRegistryClient({"url": url, "retries.wait.ms": 1, "max.retries": 2}) as client:
            with pytest.raises(SchemaRegistryError) as caught:
                client.get_subjects()
            assert (caught.value.status, caught.value.error_code) == (503, 50301)
            assert "store unavailable" in str(caught.value) and client.requests == 3
            with pytest.raises(SchemaRegistryError, match="not JSON: '<html>proxy error"):
                client.get_schema(7)
    finally:
        server.shutdown()


def test_an_unreachable_registry_names_the_subject() -> None:
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    serializer = AvroSerializer({"url": f"http://127.0.0.1:{port}", "max.retries": 0}, USER)
    try:
        with pytest.raises(SchemaSerializationError) as caught:
            serializer.serialize_record({"name": "x"}, "orders", False, [])
        assert caught.value.subject == "orders-value" and "unreachable" in str(caught.value)
    finally:
        serializer.registry.close()


def test_the_sdk_imports_without_the_extra() -> None:
    """Without httpx, fastavro, jsonschema: trafka.sdk and trafka.sdk.schemas
    import; a serde or client says which extra to install."""
    code = """
import sys
for name in ("httpx", "fastavro", "jsonschema", "referencing"):
    sys.modules[name] = None
import trafka.sdk, trafka.sdk.schemas as s
try:
    s.SchemaRegistryClient({"url": "http://127.0.0.1:1"})
except s.MissingExtraError as e:
    print("client:", e)
try:
    s.AvroSerializer({"url": "http://127.0.0.1:1"}, "{}")
except s.MissingExtraError as e:
    print("avro:", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("trafka[schemas]") == 2, out.stdout
