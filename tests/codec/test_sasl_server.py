"""The server side of SCRAM (trafka.codec.sasl.ScramServer) against clients other
than trafka's: unknown users, librdkafka's repeated nonce, authorization ids."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from trafka.codec.sasl import SaslAuthenticationError, ScramCredential, ScramServer

MECHANISM = "SCRAM-SHA-256"
USERS = {"alice": ScramCredential.from_password(MECHANISM, "pw")}


def attributes(message: bytes) -> dict[str, str]:
    return dict(item.split("=", 1) for item in message.decode().split(","))


def client_final(
    first_bare: str, server_first: bytes, password: str, *, nonce: str, gs2: str = "n,,"
) -> bytes:
    """A client-final message with ``nonce`` as its r=, proved for ``password``."""
    attrs = attributes(server_first)
    salted = hashlib.pbkdf2_hmac(
        "sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    without_proof = f"c={base64.b64encode(gs2.encode()).decode()},r={nonce}"
    auth_message = f"{first_bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def test_unknown_users_get_a_stable_salt_nobody_can_compute() -> None:
    def salt(name: str) -> bytes:
        first = ScramServer(MECHANISM, USERS.get).server_first(f"n,,n={name},r=abc".encode())
        return base64.b64decode(attributes(first)["s"])

    assert salt("mallory") == salt("mallory")  # like a real user's: probing twice tells nothing
    assert salt("mallory") != salt("eve")
    assert salt("mallory") != hashlib.sha256(b"mallory").digest()
    assert len(salt("mallory")) == len(USERS["alice"].salt)


def test_librdkafkas_repeated_client_nonce_is_accepted_exactly() -> None:
    # librdkafka before 2.6.1 sends r=<client nonce><server-first nonce>.
    bare = "n=alice,r=cnonce"
    server = ScramServer(MECHANISM, USERS.get, nonce="snonce")
    first = server.server_first(f"n,,{bare}".encode())
    combined = attributes(first)["r"]
    assert combined == "cnoncesnonce"
    final = client_final(bare, first, "pw", nonce="cnonce" + combined)
    assert server.server_final(final).startswith(b"v=")
    assert server.username == "alice"
    for wrong in ("x" + combined, "cnoncecnonce" + combined, "snonce", combined + "cnonce"):
        server = ScramServer(MECHANISM, USERS.get, nonce="snonce")
        first = server.server_first(f"n,,{bare}".encode())
        with pytest.raises(SaslAuthenticationError, match="nonce"):
            server.server_final(client_final(bare, first, "pw", nonce=wrong))


def test_channel_binding_must_be_the_header_the_client_sent() -> None:
    bare = "n=alice,r=cnonce"
    for sent, claimed, ok in [
        ("n,a=alice,", "n,a=alice,", True),
        ("n,a=alice,", "n,,", False),
        ("n,,", "n,a=alice,", False),
    ]:
        server = ScramServer(MECHANISM, USERS.get, nonce="snonce")
        first = server.server_first(f"{sent}{bare}".encode())
        final = client_final(bare, first, "pw", nonce="cnoncesnonce", gs2=claimed)
        if ok:
            server.server_final(final)
            assert server.username == "alice"
        else:
            with pytest.raises(SaslAuthenticationError, match="channel binding"):
                server.server_final(final)


def test_an_unknown_user_fails_even_with_a_proof_for_the_made_up_salt() -> None:
    bare = "n=mallory,r=cnonce"
    server = ScramServer(MECHANISM, USERS.get, nonce="snonce")
    first = server.server_first(f"n,,{bare}".encode())
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.server_final(client_final(bare, first, "anything", nonce="cnoncesnonce"))
    assert server.username is None
