"""SASL mechanisms (trafka.codec.sasl): RFC 7677's SCRAM example, both sides
against each other, and hostile messages."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trafka.codec.sasl import (
    PlainServer,
    SaslAuthenticationError,
    SaslMisuse,
    ScramClient,
    ScramCredential,
    ScramServer,
    plain_message,
)

# RFC 7677, section 3: user "user", password "pencil".
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential() -> ScramCredential:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    return ScramCredential.from_password("SCRAM-SHA-256", "pencil", salt=salt)


def test_client_reproduces_rfc_7677() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    assert client.first_message() == CLIENT_FIRST
    assert client.final_message(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)
    assert client.complete


def test_server_reproduces_rfc_7677() -> None:
    users = {"user": rfc_credential()}
    server = ScramServer("SCRAM-SHA-256", users.get, nonce=SERVER_NONCE)
    assert server.server_first(CLIENT_FIRST) == SERVER_FIRST
    assert server.server_final(CLIENT_FINAL) == SERVER_FINAL
    assert server.username == "user"


names = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=20
)


@settings(max_examples=25, deadline=None)
@given(
    mechanism=st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
    username=names,
    password=names,
)
def test_client_and_server_agree(mechanism: str, username: str, password: str) -> None:
    credential = ScramCredential.from_password(mechanism, password)
    server = ScramServer(mechanism, {username: credential}.get)
    client = ScramClient(mechanism, username, password)
    final = client.final_message(server.server_first(client.first_message()))
    client.verify(server.server_final(final))
    assert server.username == username


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_and_unknown_user_fail_alike(mechanism: str) -> None:
    users = {"alice": ScramCredential.from_password(mechanism, "right")}
    errors = []
    for user, password in (("alice", "wrong"), ("mallory", "right")):
        server = ScramServer(mechanism, users.get)
        client = ScramClient(mechanism, user, password)
        first = server.server_first(client.first_message())  # answered even for mallory
        with pytest.raises(SaslAuthenticationError) as caught:
            server.server_final(client.final_message(first))
        errors.append(str(caught.value))
        assert server.username is None
    assert errors[0] == errors[1]


def test_a_credential_of_the_other_hash_does_not_authenticate() -> None:
    users = {"alice": ScramCredential.from_password("SCRAM-SHA-512", "pw")}
    server = ScramServer("SCRAM-SHA-256", users.get)
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    with pytest.raises(SaslAuthenticationError):
        server.server_final(client.final_message(server.server_first(client.first_message())))


def test_client_checks_the_servers_first_message() -> None:
    def fresh() -> ScramClient:
        client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
        client.first_message()
        return client

    bad = {
        b"r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096": "nonce",
        b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096": "nonce",
        b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1": "iteration",
        b"r=rOprNGfwEbeRWgbNEkqOx,s=!!,i=4096": "base64",
        b"r=rOprNGfwEbeRWgbNEkqOx,i=4096": "lacks",
        b"e=other-error": "other-error",
        b"\xff\xfe": "UTF-8",
        b"garbage": "invalid",
    }
    for message, words in bad.items():
        with pytest.raises(SaslAuthenticationError, match=words):
            fresh().final_message(message)


def test_client_refuses_a_wrong_server_signature() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    client.first_message()
    client.final_message(SERVER_FIRST)
    with pytest.raises(SaslAuthenticationError, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))


def test_server_checks_the_clients_messages() -> None:
    def fresh() -> ScramServer:
        return ScramServer("SCRAM-SHA-256", {"user": rfc_credential()}.get, nonce=SERVER_NONCE)

    for first, words in {
        b"y,,n=user,r=abc": "channel binding",
        b"p=tls-unique,,n=user,r=abc": "channel binding",
        b"n,a=other,n=user,r=abc": "authorization id",
        b"n,,n=us=er,r=abc": "escape",
        b"n,,r=abc": "lacks",
        b"n,,n=user": "lacks",
        b"n": "invalid",
    }.items():
        with pytest.raises(SaslAuthenticationError, match=words):
            fresh().server_first(first)
    for final, words in {
        CLIENT_FINAL.replace(b"c=biws", b"c=eSws"): "channel binding",
        CLIENT_FINAL.replace(b"$k0,p", b"$k1,p"): "nonce",
        CLIENT_FINAL.split(b",p=")[0]: "lacks p",
        CLIENT_FINAL[:-8] + b"AAAAAAA=": "credentials",
        CLIENT_FINAL[:-4] + b"!!!=": "base64",
    }.items():
        server = fresh()
        server.server_first(CLIENT_FIRST)
        with pytest.raises(SaslAuthenticationError, match=words):
            server.server_final(final)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_server_raises_only_its_error_for_any_bytes(first: bytes, final: bytes) -> None:
    server = ScramServer("SCRAM-SHA-512", {"user": None}.get)
    try:
        server.server_first(first)
        server.server_final(final)
    except SaslAuthenticationError:
        return
    raise AssertionError("random bytes authenticated")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_client_raises_only_its_error_for_any_bytes(message: bytes) -> None:
    client = ScramClient("SCRAM-SHA-256", "u", "p")
    client.first_message()
    with pytest.raises(SaslAuthenticationError):
        client.final_message(message)


def test_steps_out_of_order_are_the_callers_bug() -> None:
    client = ScramClient("SCRAM-SHA-256", "u", "p")
    with pytest.raises(SaslMisuse):
        client.final_message(SERVER_FIRST)
    server = ScramServer("SCRAM-SHA-256", {}.get)
    with pytest.raises(SaslMisuse):
        server.server_final(CLIENT_FINAL)
    plain = PlainServer({"u": "p"}.get)
    plain.respond(plain_message("u", "p"))
    with pytest.raises(SaslMisuse):
        plain.respond(plain_message("u", "p"))


def test_plain() -> None:
    users = {"alice": "s3cret", "b\u00f6b": "p\u00e4ss"}.get
    assert plain_message("alice", "s3cret") == b"\0alice\0s3cret"
    server = PlainServer(users)
    assert server.respond(plain_message("b\u00f6b", "p\u00e4ss", authzid="b\u00f6b")) == b""
    assert server.username == "b\u00f6b"
    for message, words in {
        b"\0alice\0wrong": "invalid username or password",
        b"\0nobody\0s3cret": "invalid username or password",
        b"alice\0s3cret": "separated by NUL",
        b"\0alice\0s3cret\0": "separated by NUL",
        b"\0\0s3cret": "empty",
        b"bob\0alice\0s3cret": "authorization id",
        b"\0\xff\0x": "UTF-8",
    }.items():
        with pytest.raises(SaslAuthenticationError, match=words):
            PlainServer(users).respond(message)
    with pytest.raises(ValueError, match="NUL"):
        plain_message("a\0b", "p")


def test_credentials_need_a_known_mechanism_and_kafkas_iteration_range() -> None:
    with pytest.raises(ValueError, match="unknown SCRAM mechanism"):
        ScramCredential.from_password("SCRAM-SHA-1", "p")
    with pytest.raises(ValueError, match="iterations"):
        ScramCredential.from_password("SCRAM-SHA-256", "p", iterations=1000)


# -- Kafka's SCRAM extensions (delegation tokens, KIP-48) -----------------------------------


def test_the_tokenauth_extension_switches_the_lookup_to_tokens() -> None:
    mechanism = "SCRAM-SHA-512"
    users = {"alice": ScramCredential.from_password(mechanism, "alice-pw")}
    tokens = {"tok-1": ScramCredential.from_password(mechanism, "hmac-b64")}
    client = ScramClient(mechanism, "tok-1", "hmac-b64", extensions={"tokenauth": "true"})
    first = client.first_message()
    assert first.endswith(b",tokenauth=true")
    server = ScramServer(mechanism, users.get, token_lookup=tokens.get)
    client.verify(server.server_final(client.final_message(server.server_first(first))))
    assert (server.username, server.token_auth) == ("tok-1", True)
    assert server.extensions == {"tokenauth": "true"}
    # Without the extension the same name is a user, and there is none.
    plain_client = ScramClient(mechanism, "tok-1", "hmac-b64")
    server = ScramServer(mechanism, users.get, token_lookup=tokens.get)
    answer = server.server_first(plain_client.first_message())
    with pytest.raises(SaslAuthenticationError):
        server.server_final(plain_client.final_message(answer))
    assert not server.token_auth


@pytest.mark.parametrize("value", ["TRUE", "True"])
def test_tokenauth_is_read_as_javas_parse_boolean(value: str) -> None:
    tokens = {"t": ScramCredential.from_password("SCRAM-SHA-256", "h")}
    client = ScramClient("SCRAM-SHA-256", "t", "h", extensions={"tokenauth": value})
    server = ScramServer("SCRAM-SHA-256", {}.get, token_lookup=tokens.get)
    client.verify(
        server.server_final(client.final_message(server.server_first(client.first_message())))
    )
    assert server.token_auth


def test_a_token_login_fails_like_a_password_without_a_token_lookup() -> None:
    users = {"tok": ScramCredential.from_password("SCRAM-SHA-256", "h")}
    client = ScramClient("SCRAM-SHA-256", "tok", "h", extensions={"tokenauth": "true"})
    server = ScramServer("SCRAM-SHA-256", users.get)  # a user of that name is no token
    answer = server.server_first(client.first_message())
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.server_final(client.final_message(answer))


def test_unknown_extensions_are_kept_and_ignored_and_covered_by_the_proof() -> None:
    users = {"alice": ScramCredential.from_password("SCRAM-SHA-256", "pw")}
    client = ScramClient("SCRAM-SHA-256", "alice", "pw", extensions={"trace_id": "a=b c"})
    server = ScramServer("SCRAM-SHA-256", users.get)
    first = client.first_message()
    client.verify(server.server_final(client.final_message(server.server_first(first))))
    assert server.extensions == {"trace_id": "a=b c"} and not server.token_auth
    # An extension changed in flight breaks the proof (it is part of the bare message).
    client = ScramClient("SCRAM-SHA-256", "alice", "pw", extensions={"trace_id": "a=b c"})
    server = ScramServer("SCRAM-SHA-256", users.get)
    tampered = client.first_message().replace(b"a=b c", b"a=b d")
    answer = server.server_first(tampered)
    with pytest.raises(SaslAuthenticationError):
        server.server_final(client.final_message(answer))


@pytest.mark.parametrize(
    "bare",
    [
        b"n=alice,r=abc,tokenauth",  # no value
        b"n=alice,r=abc,a-b=1",  # a key Kafka's pattern refuses
        b"n=alice,r=abc,x=1,x=2",  # repeated
        b"r=abc,n=alice",  # out of order
        b"n=alice",  # no nonce
    ],
)
def test_malformed_client_first_messages_with_extensions_are_refused(bare: bytes) -> None:
    server = ScramServer("SCRAM-SHA-256", {}.get)
    with pytest.raises(SaslAuthenticationError):
        server.server_first(b"n,," + bare)


def test_the_client_refuses_extensions_it_cannot_send() -> None:
    for key, value in (("bad key", "v"), ("k", "a,b"), ("", "v")):
        with pytest.raises(ValueError, match="cannot be sent"):
            ScramClient("SCRAM-SHA-256", "u", "p", extensions={key: value})
