"""Field-level encryption (the ``ENCRYPT`` rule) of the drop-in's serdes
against confluent-kafka 2.16's:

* the DEK registry's models (KEKs, DEKs) read and write the same JSON;
* the local KMS derives the same key from a secret (each side decrypts the
  other's encrypted DEK);
* a DEK made by one side encrypts what the other decrypts (AES-GCM, and
  AES-SIV byte for byte);
* a record whose tagged fields one side's serializer encrypted is read by
  the other side's deserializer given the same KEK and DEK (each side keeps
  its keys in its own in-memory DEK registry, ``mock://``; the test copies
  them across), with and without DEK rotation, Avro and JSON Schema;
* the executor's settings checks and its errors (no KEK on read, no KEK
  name) are confluent-kafka's.

Needs the ``rules`` extra (tink).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("tink")


import confluent_kafka.schema_registry as theirs
import confluent_kafka.schema_registry.avro as theirs_avro
import confluent_kafka.schema_registry.json_schema as theirs_json
from confluent_kafka.schema_registry.rule_registry import RuleRegistry as TheirRuleRegistry
from confluent_kafka.schema_registry.rules.encryption import encrypt_executor as their_enc
from confluent_kafka.schema_registry.rules.encryption.dek_registry import (
    dek_registry_client as their_dek,
)
from confluent_kafka.serialization import MessageField as TheirField
from confluent_kafka.serialization import SerializationContext as TheirContext

import trafka.compat.confluent.schema_registry as ours
import trafka.compat.confluent.schema_registry.avro as ours_avro
import trafka.compat.confluent.schema_registry.json_schema as ours_json
from trafka.compat.confluent.schema_registry.rule_registry import RuleRegistry
from trafka.compat.confluent.schema_registry.rules.encryption import encrypt_executor as our_enc
from trafka.compat.confluent.schema_registry.rules.encryption.dek_registry import (
    dek_registry_client as our_dek,
)
from trafka.compat.confluent.schema_registry.rules.encryption.localkms.local_client import (
    LocalKmsClient,
)
from trafka.compat.confluent.schema_registry.rules.encryption.localkms.local_driver import (
    LocalKmsDriver,
)
from trafka.compat.confluent.serialization import MessageField, SerializationContext


def _hkdf_module() -> None:
    """confluent-kafka's local KMS imports the ``hkdf`` package (not among our
    dependencies): when it is missing, an ``hkdf`` of cryptography's HMAC
    (RFC 5869; not the drop-in's code) stands in."""
    import importlib.util
    import sys
    import types

    if importlib.util.find_spec("hkdf") is not None:
        return
    from cryptography.hazmat.primitives import hashes, hmac

    def _mac(key: bytes, data: bytes) -> bytes:
        h = hmac.HMAC(key, hashes.SHA256())
        h.update(data)
        return h.finalize()

    def hkdf_extract(salt: bytes | None, input_key_material: bytes, hash: Any = None) -> bytes:
        return _mac(salt or bytes(32), input_key_material)

    def hkdf_expand(prk: bytes, info: bytes = b"", length: int = 32, hash: Any = None) -> bytes:
        out, block = b"", b""
        for i in range(1, -(-length // 32) + 1):
            block = _mac(prk, block + info + bytes([i]))
            out += block
        return out[:length]

    module = types.ModuleType("hkdf")
    module.hkdf_extract = hkdf_extract  # type: ignore[attr-defined]
    module.hkdf_expand = hkdf_expand  # type: ignore[attr-defined]
    sys.modules["hkdf"] = module


def _their_local_kms() -> tuple[Any, Any]:
    """confluent-kafka's local KMS client and driver classes."""
    _hkdf_module()
    from confluent_kafka.schema_registry.rules.encryption.localkms import local_client, local_driver

    return local_client.LocalKmsClient, local_driver.LocalKmsDriver


TheirLocalKms, TheirLocalDriver = _their_local_kms()
LocalKmsDriver.register()
TheirLocalDriver.register()

SECRET = "mysecret"
AVRO = {
    "type": "record",
    "name": "Person",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "name", "type": "string", "confluent:tags": ["PII"]},
        {"name": "photo", "type": "bytes", "confluent:tags": ["PII"]},
        {"name": "note", "type": ["null", "string"], "confluent:tags": ["PII"]},
        {"name": "city", "type": "string"},
    ],
}
JSON = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string", "confluent:tags": ["PII"]},
        "city": {"type": "string"},
    },
}
PERSON = {"id": 7, "name": "Ann", "photo": b"\x00\x01face", "note": "secret", "city": "Oslo"}


class _FixedClock:
    """A clock both sides read (milliseconds), moved by the tests."""

    def __init__(self) -> None:
        self.millis = 1_700_000_000_000

    def now(self) -> int:
        return self.millis


def _rule(api: Any, params: dict[str, str], payload: bool = False) -> Any:
    return api.Rule(
        "encrypt-pii",
        "",
        api.RuleKind.TRANSFORM,
        api.RuleMode.WRITEREAD,
        "ENCRYPT_PAYLOAD" if payload else "ENCRYPT",
        None if payload else ["PII"],
        api.RuleParams(params),
        None,
        None,
        "ERROR,NONE",
        False,
    )


def _params(kek: str, **extra: str) -> dict[str, str]:
    return {
        "encrypt.kek.name": kek,
        "encrypt.kms.type": "local-kms",
        "encrypt.kms.key.id": "mykey",
        **extra,
    }


class _Side:
    """One library: its mock registry (the schema and its rule registered),
    its own rule registry with an ENCRYPT executor, and its serdes."""

    def __init__(
        self,
        api: Any,
        fmt: str,
        params: dict[str, str],
        clock: _FixedClock,
        payload: bool = False,
    ) -> None:
        mine = api is ours
        self.api = api
        self.client = api.SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
        text = json.dumps(AVRO if fmt == "AVRO" else JSON)
        rule = _rule(api, params, payload)
        rule_set = api.RuleSet(None, None, [rule]) if payload else api.RuleSet(None, [rule])
        self.client.register_schema("t-value", api.Schema(text, fmt, [], None, rule_set))
        enc = our_enc if mine else their_enc
        if payload:
            self.executor = enc.EncryptionExecutor(clock)  # type: ignore[arg-type]
            self.inner = self.executor
        else:
            self.executor = enc.FieldEncryptionExecutor(clock)  # type: ignore[arg-type]
            self.inner = self.executor.executor
        self.rules = RuleRegistry() if mine else TheirRuleRegistry()
        self.rules.register_executor(self.executor)
        if mine:
            self.ctx: Any = SerializationContext("t", MessageField.VALUE)
        else:
            self.ctx = TheirContext("t", TheirField.VALUE)
        self.fmt, self.text = fmt, text

        self.serializer, self.deserializer = self._serdes()

    def _serdes(self) -> tuple[Any, Any]:
        conf = {"auto.register.schemas": False, "use.latest.version": True}
        rule_conf = {"secret": SECRET}
        mine = self.api is ours
        if self.fmt == "AVRO":
            module: Any = ours_avro if mine else theirs_avro
            return (
                module.AvroSerializer(
                    self.client, None, conf=conf, rule_conf=rule_conf, rule_registry=self.rules
                ),
                module.AvroDeserializer(self.client, rule_conf=rule_conf, rule_registry=self.rules),
            )
        module = ours_json if mine else theirs_json
        return (
            module.JSONSerializer(
                None, self.client, conf=conf, rule_conf=rule_conf, rule_registry=self.rules
            ),
            module.JSONDeserializer(
                None,
                schema_registry_client=self.client,
                rule_conf=rule_conf,
                rule_registry=self.rules,
            ),
        )

    def write(self, record: dict[str, Any]) -> bytes:
        return self.serializer(dict(record), self.ctx)  # type: ignore[no-any-return]

    def read(self, data: bytes) -> Any:
        return self.deserializer(data, self.ctx)

    def use_dek_registry(self, url: str) -> None:
        """Keep the keys in the DEK registry at ``url`` (the serdes configured
        the executor with their mock registry's settings)."""
        dek_module = our_dek if self.api is ours else their_dek
        self.inner.client = dek_module.DekRegistryClient({"url": url})

    @property
    def deks(self) -> Any:
        return self.inner.client

    def share_keys_with(self, other: _Side, kek: str, algorithm: str, versions: int) -> None:
        """Copy this side's KEK and DEKs into ``other``'s DEK registry."""
        found = self.deks.get_kek(kek)
        other_deks = other.deks
        other_deks.register_kek(kek, found.kms_type, found.kms_key_id, bool(found.shared))
        their_algorithm = (our_dek if other.api is ours else their_dek).DekAlgorithm[algorithm]
        mine_algorithm = (our_dek if self.api is ours else their_dek).DekAlgorithm[algorithm]
        for version in range(1, versions + 1):
            dek = self.deks.get_dek(kek, "t-value", mine_algorithm, version)
            other_deks.register_dek(
                kek, "t-value", dek.encrypted_key_material, their_algorithm, version
            )


SIDES = [(ours, theirs), (theirs, ours), (ours, ours)]
IDS = ["ours-to-theirs", "theirs-to-ours", "ours-to-ours"]


@pytest.mark.parametrize(("writer", "reader"), SIDES, ids=IDS)
@pytest.mark.parametrize("algorithm", ["AES256_GCM", "AES128_GCM", "AES256_SIV"])
def test_avro_fields_encrypted_by_one_side_are_read_by_the_other(
    writer: Any, reader: Any, algorithm: str
) -> None:
    kek = f"kek-{uuid.uuid4().hex[:8]}"
    params = _params(kek, **{"encrypt.dek.algorithm": algorithm})
    clock = _FixedClock()
    w, r = _Side(writer, "AVRO", params, clock), _Side(reader, "AVRO", params, clock)
    data = w.write(PERSON)
    # the tagged fields are not in clear; the untagged one is
    assert b"Ann" not in data and b"face" not in data and b"secret" not in data
    assert b"Oslo" in data
    assert w.read(data) == PERSON
    w.share_keys_with(r, kek, algorithm, 1)
    assert r.read(data) == PERSON
    if algorithm == "AES256_SIV":  # deterministic: the same record, the same bytes
        assert w.write(PERSON) == data


@pytest.mark.parametrize(("writer", "reader"), SIDES, ids=IDS)
def test_json_fields_encrypted_by_one_side_are_read_by_the_other(writer: Any, reader: Any) -> None:
    kek = f"kek-{uuid.uuid4().hex[:8]}"
    params = _params(kek)
    clock = _FixedClock()
    w, r = _Side(writer, "JSON", params, clock), _Side(reader, "JSON", params, clock)
    record = {"id": 7, "name": "Ann", "city": "Oslo"}
    data = w.write(record)
    assert b"Ann" not in data and b"Oslo" in data
    encrypted = json.loads(data[5:])["name"]
    assert len(base64.b64decode(encrypted)) == 12 + 3 + 16  # GCM: nonce, text, tag
    w.share_keys_with(r, kek, "AES256_GCM", 1)
    assert r.read(data) == record


@pytest.mark.parametrize(("writer", "reader"), SIDES, ids=IDS)
@pytest.mark.parametrize("fmt", ["AVRO", "JSON"])
def test_payloads_encrypted_by_one_side_are_read_by_the_other(
    writer: Any, reader: Any, fmt: str
) -> None:
    kek = f"kek-{uuid.uuid4().hex[:8]}"
    clock = _FixedClock()
    w = _Side(writer, fmt, _params(kek), clock, payload=True)
    r = _Side(reader, fmt, _params(kek), clock, payload=True)
    record = dict(PERSON) if fmt == "AVRO" else {"id": 7, "name": "Ann", "city": "Oslo"}
    data = w.write(record)
    # the whole payload is encrypted (after the schema id): nothing in clear
    assert data[:5] == b"\x00\x00\x00\x00\x01"
    assert b"Ann" not in data and b"Oslo" not in data
    w.share_keys_with(r, kek, "AES256_GCM", 1)
    assert r.read(data) == record


@pytest.mark.parametrize(("writer", "reader"), SIDES, ids=IDS)
def test_rotated_deks_are_versioned_in_each_value(writer: Any, reader: Any) -> None:
    kek = f"kek-{uuid.uuid4().hex[:8]}"
    params = _params(kek, **{"encrypt.dek.expiry.days": "1"})
    clock = _FixedClock()
    clock.millis = int(time.time() * 1000)  # the mock registries stamp DEKs with the time
    w, r = _Side(writer, "JSON", params, clock), _Side(reader, "JSON", params, clock)
    record = {"id": 7, "name": "Ann", "city": "Oslo"}
    first = w.write(record)
    assert w.deks.get_dek(kek, "t-value", version=-1).version == 1
    # the version rides in front of the ciphertext: a zero byte, 4 bytes big-endian
    assert base64.b64decode(json.loads(first[5:])["name"])[:5] == b"\x00\x00\x00\x00\x01"
    clock.millis += 2 * 24 * 60 * 60 * 1000  # two days on: a new version
    second = w.write(record)
    assert w.deks.get_dek(kek, "t-value", version=-1).version == 2
    assert base64.b64decode(json.loads(second[5:])["name"])[:5] == b"\x00\x00\x00\x00\x02"
    w.share_keys_with(r, kek, "AES256_GCM", 2)
    assert r.read(first) == record
    assert r.read(second) == record


def test_the_models_write_and_read_confluent_kafkas_json() -> None:
    kek = {
        "name": "k1",
        "kmsType": "local-kms",
        "kmsKeyId": "mykey",
        "kmsProps": {"secret": "s"},
        "doc": "d",
        "shared": True,
        "ts": 5,
        "deleted": False,
    }
    dek = {
        "kekName": "k1",
        "subject": "t-value",
        "version": 2,
        "algorithm": "AES256_SIV",
        "encryptedKeyMaterial": "YWJj",
        "keyMaterial": "ZGVm",
        "ts": 9,
    }
    assert our_dek.Kek.from_dict(kek).to_dict() == their_dek.Kek.from_dict(kek).to_dict() == kek
    assert our_dek.Dek.from_dict(dek).to_dict() == their_dek.Dek.from_dict(dek).to_dict() == dek
    ours_dek = our_dek.Dek.from_dict(dek)
    assert ours_dek.get_key_material_bytes() == b"def"
    assert ours_dek.get_encrypted_key_material_bytes() == b"abc"
    ours_dek.set_key_material(b"xyz")
    assert ours_dek.get_key_material_bytes() == b"xyz"
    request = {"subject": "s", "version": 1, "algorithm": "AES256_GCM"}
    assert (
        our_dek.CreateDekRequest.from_dict(request).to_dict()
        == their_dek.CreateDekRequest.from_dict(request).to_dict()
    )
    assert str(our_dek.DekAlgorithm.AES128_GCM) == str(their_dek.DekAlgorithm.AES128_GCM)


def test_the_local_kms_derives_confluent_kafkas_key() -> None:
    mine = LocalKmsClient(SECRET).get_aead("local-kms://k")
    their = TheirLocalKms(SECRET).get_aead("local-kms://k")
    assert their.decrypt(mine.encrypt(b"dek", b""), b"") == b"dek"
    assert mine.decrypt(their.encrypt(b"dek", b""), b"") == b"dek"
    other = LocalKmsClient("another").get_aead("local-kms://k")
    with pytest.raises(Exception):  # noqa: B017 (tink's error, as theirs)
        other.decrypt(their.encrypt(b"dek", b""), b"")
    with pytest.raises(TypeError):
        LocalKmsClient(None)


@pytest.mark.parametrize("algorithm", ["AES128_GCM", "AES256_GCM", "AES256_SIV"])
def test_a_dek_of_either_side_encrypts_what_the_other_decrypts(algorithm: str) -> None:
    mine = our_enc.Cryptor(our_dek.DekAlgorithm[algorithm])
    their = their_enc.Cryptor(their_dek.DekAlgorithm[algorithm])
    for key in (mine.generate_key(), their.generate_key()):
        assert their.decrypt(key, mine.encrypt(key, b"hello", b""), b"") == b"hello"
        assert mine.decrypt(key, their.encrypt(key, b"hello", b""), b"") == b"hello"
        if algorithm == "AES256_SIV":
            assert mine.encrypt(key, b"hello", b"") == their.encrypt(key, b"hello", b"")


def test_the_executors_settings_checks_are_confluent_kafkas() -> None:
    for enc in (our_enc, their_enc):
        executor = enc.FieldEncryptionExecutor()
        assert executor.type() == "ENCRYPT"
        assert enc.EncryptionExecutor().type() == "ENCRYPT_PAYLOAD"
        executor.configure({"url": "mock://"}, {"a": "1"})
        executor.configure({"url": "mock://"}, {"b": "2"})
        assert executor.executor.config == {"a": "1", "b": "2"}
        with pytest.raises(Exception, match="rule config key already set: a"):
            executor.configure({"url": "mock://"}, {"a": "3"})
        with pytest.raises(Exception, match="executor already configured"):
            executor.configure({"url": "mock://other"}, {})
    assert type(our_dek.DekRegistryClient.new_client({})).__name__ == "MockDekRegistryClient"


@pytest.mark.parametrize(
    ("params", "read_first", "expected"),
    [
        (
            {"encrypt.kms.type": "local-kms", "encrypt.kms.key.id": "k"},
            False,
            "fails",
        ),  # no kek name
        ({"encrypt.kek.name": "", "encrypt.kms.type": "local-kms"}, False, "fails"),
        (_params("kek-x", **{"encrypt.dek.expiry.days": "-1"}), False, "fails"),
        (_params("kek-x", **{"encrypt.dek.expiry.days": "soon"}), False, "fails"),
        ({"encrypt.kek.name": "kek-y"}, False, "fails"),  # no kms type to register it with
        # read before any write: no KEK, and the rule's NONE action on read lets it pass
        (_params("kek-z"), True, PERSON),
    ],
)
def test_rule_errors_fail_both_serdes_alike(
    params: dict[str, str], read_first: bool, expected: Any
) -> None:
    outcomes: list[Any] = []
    for api in (ours, theirs):
        side = _Side(api, "AVRO", params, _FixedClock())
        try:
            if read_first:
                # written without the rule (another registry: the same schema id)
                outcomes.append(side.read(_plain_avro(api)))
            else:
                outcomes.append(side.write(PERSON))
        except api.SerializationError:
            outcomes.append("fails")
    assert outcomes == [expected, expected]


def _plain_avro(api: Any) -> bytes:
    """PERSON as Avro with schema id 1, no field encrypted."""
    client = api.SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    module: Any = ours_avro if api is ours else theirs_avro
    ctx: Any = (
        SerializationContext("t", MessageField.VALUE)
        if api is ours
        else TheirContext("t", TheirField.VALUE)
    )
    return module.AvroSerializer(client, json.dumps(AVRO))(dict(PERSON), ctx)  # type: ignore[no-any-return]


# -- through brokerlite's DEK registry ----------------------------------------------------


@pytest.fixture(scope="module")
def dek_registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from trafka.brokerlite.server import broker_in_thread

    data = tmp_path_factory.mktemp("csfle")
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=data, schema_registry_listen="127.0.0.1:0"
    ) as running:
        assert running.schema_registry_address is not None
        host, port = running.schema_registry_address
        yield f"http://{host}:{port}"


def _status(call: Any) -> Any:
    try:
        call()
    except (ours.SchemaRegistryError, theirs.SchemaRegistryError) as exc:
        return exc.http_status_code, exc.error_code
    return None


def test_both_dek_clients_share_keys_through_brokerlite(dek_registry_url: str) -> None:
    mine = our_dek.DekRegistryClient({"url": dek_registry_url})
    their = their_dek.DekRegistryClient({"url": dek_registry_url})
    kek = f"kek-{uuid.uuid4().hex[:8]}"
    made = mine.register_kek(kek, "local-kms", "mykey", doc="d", kms_props={"a": "b"})
    seen = their.get_kek(kek)
    assert made.to_dict() == seen.to_dict()
    assert seen.kms_props is not None and seen.kms_props.properties == {"a": "b"}
    assert (seen.name, seen.kms_type, seen.shared) == (kek, "local-kms", False)
    gcm = their_dek.DekAlgorithm.AES256_GCM
    their.register_dek(kek, "s-value", "YWJj", gcm, 1)
    their.register_dek(kek, "s-value", "ZGVm", gcm, 2)
    latest = mine.get_dek(kek, "s-value", our_dek.DekAlgorithm.AES256_GCM, -1)
    assert (latest.version, latest.get_encrypted_key_material_bytes()) == (2, b"def")
    assert mine.get_dek(kek, "s-value", version=1).encrypted_key_material == "YWJj"
    # the same refusals, with the same codes, on both
    for client in (mine, their):
        assert _status(lambda c=client: c.get_kek("nope")) == (404, 40470)
        assert _status(lambda c=client: c.get_dek(kek, "other-value")) == (404, 40470)
        # brokerlite reaches no KMS: a DEK without key material (a shared KEK's) is refused
        assert _status(lambda c=client: c.register_dek(kek, "x-value", None)) == (422, 42271)
    fresh = (
        our_dek.DekRegistryClient({"url": dek_registry_url}),
        their_dek.DekRegistryClient({"url": dek_registry_url}),
    )
    for client in fresh:  # no cache to answer: the registry's 409
        assert _status(lambda c=client: c.register_kek(kek, "local-kms", "k2")) == (409, 40972)
    mine.close()


@pytest.mark.parametrize(("writer", "reader"), SIDES[:2], ids=IDS[:2])
def test_fields_encrypted_by_one_side_are_read_through_brokerlite(
    dek_registry_url: str, writer: Any, reader: Any
) -> None:
    kek = f"kek-{uuid.uuid4().hex[:8]}"
    params = _params(kek, **{"encrypt.dek.algorithm": "AES256_SIV"})
    clock = _FixedClock()
    w, r = _Side(writer, "AVRO", params, clock), _Side(reader, "AVRO", params, clock)
    w.use_dek_registry(dek_registry_url)
    r.use_dek_registry(dek_registry_url)
    data = w.write(PERSON)
    assert b"Ann" not in data
    assert r.read(data) == PERSON  # the reader found the writer's KEK and DEK
    assert r.write(PERSON) == data  # deterministic: one DEK for both
