"""Test helper: a local AWS STS answering ``GetWebIdentityToken`` (AWS's query
protocol, an XML answer) with JWTs signed by keys the test makes, and an
environment where boto3 signs with test credentials and reads nothing of the
machine's. Used by the SDK's and the drop-in's AWS IAM OAUTHBEARER tests
(``tests/conftest.py`` puts this folder on the path).
"""

from __future__ import annotations

import datetime
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from oauth_keys import SigningKey

ROLE = "arn:aws:iam::123456789012:role/kafka-client"
AUDIENCE = "https://kafka.example"
STS_NS = "https://sts.amazonaws.com/doc/2011-06-15/"


class FakeSts:
    """STS's ``GetWebIdentityToken`` on 127.0.0.1: the form of each request is
    kept (with its ``Authorization`` header); the answer is a JWT for ``ROLE``
    signed with the algorithm asked for, expiring ``DurationSeconds`` after
    ``now()``; with ``refuse`` set, STS's ``AccessDenied`` instead."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self.keys = {"ES384": SigningKey("sts-es384", "ES384"), "RS256": SigningKey("sts-rs256")}
        self.now = now
        self.requests: list[dict[str, str]] = []
        self.refuse = False
        self.issued: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                form = {k: v[0] for k, v in urllib.parse.parse_qs(body).items()}
                form["Authorization"] = self.headers.get("Authorization", "")
                fake.requests.append(form)
                status, answer = fake.answer(form)
                data = answer.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, form: dict[str, str]) -> tuple[int, str]:
        if self.refuse or form.get("Action") != "GetWebIdentityToken":
            return 403, (
                f'<ErrorResponse xmlns="{STS_NS}"><Error><Type>Sender</Type>'
                "<Code>AccessDenied</Code><Message>not authorized to perform "
                "sts:GetWebIdentityToken</Message></Error><RequestId>r1</RequestId></ErrorResponse>"
            )
        now = int(self.now())
        expiry = now + int(form["DurationSeconds"])
        tags = {
            form[f"Tags.member.{i}.Key"]: form[f"Tags.member.{i}.Value"]
            for i in range(1, 51)
            if f"Tags.member.{i}.Key" in form
        }
        claims = {"sub": ROLE, "aud": form["Audience.member.1"], "iat": now, "exp": expiry}
        if tags:
            claims["request_tags"] = tags
        jwt = self.keys[form["SigningAlgorithm"]].sign(claims)
        self.issued.append(jwt)
        when = datetime.datetime.fromtimestamp(expiry, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return 200, (
            f'<GetWebIdentityTokenResponse xmlns="{STS_NS}"><GetWebIdentityTokenResult>'
            f"<WebIdentityToken>{jwt}</WebIdentityToken><Expiration>{when}</Expiration>"
            "</GetWebIdentityTokenResult><ResponseMetadata><RequestId>r2</RequestId>"
            "</ResponseMetadata></GetWebIdentityTokenResponse>"
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """boto3's credentials from the environment, and nothing from this machine."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDTRAFKATEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
