"""The registry clients' bearer authentication against confluent-kafka 2.16's:
an OAuth 2 token fetched with the client's credentials (OAUTHBEARER), a static
token, a custom function's fields; each request carries the same headers, and
the token is fetched once while it lives. The registry and its token endpoint
are a small HTTP server on 127.0.0.1 that records what it is sent."""

from __future__ import annotations

import base64
import importlib
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from trafka.sdk.schemas import SchemaRegistryClient as SdkClient

APIS = ["confluent_kafka", "trafka.compat.confluent"]
WATCHED = ("authorization", "target-sr-cluster", "confluent-identity-pool-id")


class Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        auth = self.headers.get("Authorization", "")
        client = base64.b64decode(auth.split(" ", 1)[1]).decode() if " " in auth else ""
        self.seen.append(("token", client, (form.get("grant_type"), form.get("scope"))))
        self._answer({"access_token": "tok-1", "token_type": "bearer", "expires_in": 3600})

    def do_GET(self) -> None:
        if self.path.startswith("/token"):  # Azure's metadata service
            self.seen.append(("imds", self.path, self.headers.get("Metadata")))
            expiry = {"expires_in": "3600", "expires_on": "9999999999"}
            self._answer({"access_token": "tok-2", **expiry})
            return
        headers = {k: self.headers.get(k) for k in WATCHED}
        self.seen.append(("GET", self.path.split("?")[0], headers))
        self._answer(["s1"])


@pytest.fixture()
def server() -> Iterator[str]:
    Recorder.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        thread.join()


def _fields(config: dict[str, Any]) -> dict[str, Any]:
    return {"bearer.auth.token": config["t"], "bearer.auth.logical.cluster": "lsrc-c"}


def _confs(url: str) -> dict[str, dict[str, Any]]:
    return {
        "oauth": {
            "url": url,
            "bearer.auth.credentials.source": "OAUTHBEARER",
            "bearer.auth.logical.cluster": "lsrc-1",
            "bearer.auth.identity.pool.id": ["pool-1", "pool-2"],
            "bearer.auth.client.id": "me",
            "bearer.auth.client.secret": "secret",
            "bearer.auth.scope": "registry",
            "bearer.auth.issuer.endpoint.url": url + "/token",
        },
        "static": {
            "url": url,
            "bearer.auth.credentials.source": "STATIC_TOKEN",
            "bearer.auth.logical.cluster": "lsrc-2",
            "bearer.auth.token": "fixed",
        },
        "custom": {
            "url": url,
            "bearer.auth.credentials.source": "CUSTOM",
            "bearer.auth.custom.provider.function": _fields,
            "bearer.auth.custom.provider.config": {"t": "custom-token"},
        },
        "basic": {"url": url, "basic.auth.user.info": "user:pw"},
        "imds": {
            "url": url,
            "bearer.auth.credentials.source": "OAUTHBEARER_AZURE_IMDS",
            "bearer.auth.logical.cluster": "lsrc-3",
            "bearer.auth.issuer.endpoint.url": url + "/token",
            "bearer.auth.issuer.endpoint.query": "resource=api://x&api-version=2018-02-01",
        },
    }


@pytest.mark.parametrize("kind", ["oauth", "imds", "static", "custom", "basic"])
def test_the_requests_carry_confluent_kafkas_credentials(server: str, kind: str) -> None:
    seen = {}
    for api in APIS:
        Recorder.seen = []
        module = importlib.import_module(f"{api}.schema_registry")
        with module.SchemaRegistryClient(_confs(server)[kind]) as client:
            assert client.get_subjects() == ["s1"]
            assert client.get_subjects() == ["s1"]
        seen[api] = list(Recorder.seen)
    assert seen["trafka.compat.confluent"] == seen["confluent_kafka"]
    assert len(seen["confluent_kafka"]) == (3 if kind in ("oauth", "imds") else 2)


def test_the_sdk_client_fetches_an_oauth_token_too(server: str) -> None:
    conf = dict(_confs(server)["oauth"])
    conf["bearer.auth.identity.pool.id"] = "pool-1"
    with SdkClient(conf) as client:
        assert client.get_subjects() == ["s1"]
        assert client.get_subjects() == ["s1"]
    token, first, second = Recorder.seen
    assert token == ("token", "me:secret", (["client_credentials"], ["registry"]))
    expected = {
        "authorization": "Bearer tok-1",
        "target-sr-cluster": "lsrc-1",
        "confluent-identity-pool-id": "pool-1",
    }
    assert first == second == ("GET", "/subjects", expected)
