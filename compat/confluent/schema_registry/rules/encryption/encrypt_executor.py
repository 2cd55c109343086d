"""confluent-kafka's field-level encryption (CSFLE): the ``ENCRYPT`` rule
(:class:`FieldEncryptionExecutor`: the string and bytes fields carrying the
rule's tags) and ``ENCRYPT_PAYLOAD`` (:class:`EncryptionExecutor`: a whole
payload).

A value is encrypted with a data-encryption key (DEK) of the rule's KEK
(``encrypt.kek.name``), the subject and a version, kept in the DEK registry
(:mod:`.dek_registry.dek_registry_client`). On the first write the KEK is
registered (``encrypt.kms.type``, ``encrypt.kms.key.id``), then a DEK made: by
this client, its key material encrypted by the KMS, or (a shared KEK) by the
registry. ``encrypt.dek.algorithm`` picks AES256_GCM (the default), AES128_GCM
or AES256_SIV (deterministic). With ``encrypt.dek.expiry.days`` a DEK older
than that is replaced by a new version, and each ciphertext starts with the
version (a zero byte, then 4 bytes big-endian). The ciphertext is tink's raw
one (no key prefix); a string field holds it in base64.

Needs the ``rules`` extra (tink).
"""

from __future__ import annotations

import base64
import io
import logging
import threading
import time
from typing import Any

from tink import KmsClient, TinkError, aead, daead, kms_client_from_uri, register_kms_client
from tink.core import Registry
from tink.proto import aes_siv_pb2, tink_pb2

from ...common.serde import (
    FieldContext,
    FieldRuleExecutor,
    FieldTransform,
    FieldType,
    RuleContext,
    RuleError,
    RuleExecutor,
)
from ...error import SchemaRegistryError
from ...rule_registry import RuleRegistry
from .dek_registry.dek_registry_client import (
    Dek,
    DekAlgorithm,
    DekId,
    DekRegistryClient,
    Kek,
    KekId,
)
from .kms_driver_registry import KmsDriver, get_kms_driver

__all__ = [
    "ENCRYPT_ALTERNATE_KMS_KEY_IDS",
    "ENCRYPT_DEK_ALGORITHM",
    "ENCRYPT_DEK_EXPIRY_DAYS",
    "ENCRYPT_KEK_NAME",
    "ENCRYPT_KMS_KEY_ID",
    "ENCRYPT_KMS_TYPE",
    "MILLIS_IN_DAY",
    "AeadWrapper",
    "Clock",
    "Cryptor",
    "EncryptionExecutor",
    "EncryptionExecutorTransform",
    "FieldEncryptionExecutor",
    "FieldEncryptionExecutorTransform",
]

log = logging.getLogger(__name__)

aead.register()
daead.register()

ENCRYPT_KEK_NAME = "encrypt.kek.name"
ENCRYPT_KMS_KEY_ID = "encrypt.kms.key.id"
ENCRYPT_KMS_TYPE = "encrypt.kms.type"
ENCRYPT_DEK_ALGORITHM = "encrypt.dek.algorithm"
ENCRYPT_DEK_EXPIRY_DAYS = "encrypt.dek.expiry.days"
ENCRYPT_ALTERNATE_KMS_KEY_IDS = "encrypt.alternate.kms.key.ids"

MILLIS_IN_DAY = 24 * 60 * 60 * 1000

_VERSION_MAGIC = 0  # the byte before a rotated DEK's version in a ciphertext


def _mode(ctx: RuleContext) -> str:
    mode = ctx.rule_mode
    return str(getattr(mode, "value", mode))


def _context_of(subject: str | None) -> str | None:
    """The registry context of a qualified subject (``:.ctx:subject``), None
    for an unqualified one or the default context (``:.:subject``)."""
    if not subject or not subject.startswith(":."):
        return None
    end = subject.find(":", 2)
    context = subject[1:] if end < 0 else subject[1:end]
    return None if context == "." else context


def _status(exc: Exception) -> int | None:
    return exc.http_status_code if isinstance(exc, SchemaRegistryError) else None


class Clock:
    """The time DEK expiry is measured with (tests give their own)."""

    def now(self) -> int:
        """Milliseconds since the epoch."""
        return round(time.time() * 1000)


class EncryptionExecutor(RuleExecutor):
    """Runs ``ENCRYPT_PAYLOAD`` rules; holds the DEK registry client and the
    rules' settings (the KMS credentials) of every encryption rule it runs."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.client: DekRegistryClient | None = None
        self.config: dict[str, Any] | None = None
        self.clock = clock if clock is not None else Clock()
        self._lock = threading.Lock()

    def configure(self, client_conf: dict[str, Any], rule_conf: dict[str, Any]) -> None:
        """Take the registry client's settings (once: other ones fail) and the
        rules' (added to; a key set to another value fails).

        Raises:
            RuleError: configured with other settings.
        """
        with self._lock:
            if client_conf:
                if self.client is None:
                    self.client = DekRegistryClient.new_client(client_conf)
                elif self.client.config() != client_conf:
                    raise RuleError("executor already configured")
            if not self.config:
                self.config = dict(rule_conf) if rule_conf else {}
                return
            for key, value in (rule_conf or {}).items():
                known = self.config.get(key)
                if known is None:
                    self.config[key] = value
                elif known != value:
                    raise RuleError(f"rule config key already set: {key}")

    def type(self) -> str:
        return "ENCRYPT_PAYLOAD"

    def transform(self, ctx: RuleContext, message: Any) -> Any:
        return self.new_transform(ctx).transform(ctx, FieldType.BYTES, message)

    def new_transform(self, ctx: RuleContext) -> EncryptionExecutorTransform:
        """The transform of the rule ``ctx`` runs (its KEK, algorithm and expiry).

        Raises:
            RuleError: a missing or invalid rule parameter.
        """
        name = ctx.get_parameter(ENCRYPT_DEK_ALGORITHM)
        try:
            algorithm = DekAlgorithm.AES256_GCM if name is None else DekAlgorithm[name]
        except KeyError:
            raise RuleError(f"invalid dek algorithm {name}") from None
        kek_name = ctx.get_parameter(ENCRYPT_KEK_NAME)
        if kek_name is None:
            raise RuleError("no kek name found")
        if kek_name == "":
            raise RuleError("empty kek name")
        return EncryptionExecutorTransform(
            self, Cryptor(algorithm), kek_name, self._expiry_days(ctx)
        )

    @staticmethod
    def _expiry_days(ctx: RuleContext) -> int:
        text = ctx.get_parameter(ENCRYPT_DEK_EXPIRY_DAYS)
        if text is None:
            return 0
        try:
            days = int(text)
        except ValueError:
            raise RuleError("invalid expiry days") from None
        if days < 0:
            raise RuleError("negative expiry days")
        return days

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    @classmethod
    def register(cls) -> None:
        """Add an executor to the global rule registry."""
        RuleRegistry.register_rule_executor(cls())

    @classmethod
    def register_with_clock(cls, clock: Clock) -> EncryptionExecutor:
        """Add an executor measuring time with ``clock``; the executor."""
        executor = cls(clock)
        RuleRegistry.register_rule_executor(executor)
        return executor


def _key_template(algorithm: DekAlgorithm) -> Any:
    if algorithm is DekAlgorithm.AES128_GCM:
        return aead.aead_key_templates.AES128_GCM_RAW
    if algorithm is DekAlgorithm.AES256_GCM:
        return aead.aead_key_templates.AES256_GCM_RAW
    if algorithm is DekAlgorithm.AES256_SIV:
        # tink has no raw AES-SIV template: 64 bytes (two AES-256 keys), no prefix
        return tink_pb2.KeyTemplate(
            type_url=daead.deterministic_aead_key_templates.AES256_SIV.type_url,
            output_prefix_type=tink_pb2.RAW,
            value=aes_siv_pb2.AesSivKeyFormat(key_size=64).SerializeToString(),
        )
    raise RuleError("invalid dek algorithm")


class Cryptor:
    """Makes DEKs of one algorithm, and encrypts and decrypts with them
    (a DEK: tink's serialized key of that algorithm)."""

    EMPTY_AAD = b""

    def __init__(self, dek_format: DekAlgorithm) -> None:
        self.dek_format = dek_format
        self.is_deterministic = dek_format == DekAlgorithm.AES256_SIV
        self.key_template = _key_template(dek_format)
        self.registry = Registry()

    def generate_key(self) -> bytes:
        """A new DEK's key material."""
        return self.registry.new_key_data(self.key_template).value  # type: ignore[no-any-return]

    def _primitive(self, dek: bytes) -> Any:
        key_data = tink_pb2.KeyData(
            type_url=self.key_template.type_url,
            value=dek,
            key_material_type=tink_pb2.KeyData.SYMMETRIC,
        )
        kind = daead.DeterministicAead if self.is_deterministic else aead.Aead
        return self.registry.primitive(key_data, kind)

    def encrypt(self, dek: bytes, plaintext: bytes, associated_data: bytes) -> bytes:
        primitive = self._primitive(dek)
        if self.is_deterministic:
            return primitive.encrypt_deterministically(plaintext, associated_data)  # type: ignore[no-any-return]
        return primitive.encrypt(plaintext, associated_data)  # type: ignore[no-any-return]

    def decrypt(self, dek: bytes, ciphertext: bytes, associated_data: bytes) -> bytes:
        primitive = self._primitive(dek)
        if self.is_deterministic:
            return primitive.decrypt_deterministically(ciphertext, associated_data)  # type: ignore[no-any-return]
        return primitive.decrypt(ciphertext, associated_data)  # type: ignore[no-any-return]


class EncryptionExecutorTransform:
    """One rule's encryption: its KEK (fetched, or registered on write, once)
    and the DEKs of the rule's subject."""

    def __init__(
        self, executor: EncryptionExecutor, cryptor: Cryptor, kek_name: str, dek_expiry_days: int
    ) -> None:
        self._executor = executor
        self._cryptor = cryptor
        self._kek_name = kek_name
        self._kek: Kek | None = None
        self._dek_expiry_days = dek_expiry_days

    def _client(self) -> DekRegistryClient:
        client = self._executor.client
        if client is None:
            raise RuleError("client not configured")
        return client

    def _is_dek_rotated(self) -> bool:
        return self._dek_expiry_days > 0

    # -- the KEK ---------------------------------------------------------------------------

    def _get_kek(self, ctx: RuleContext) -> Kek:
        if self._kek is None:
            self._kek = self._get_or_create_kek(ctx)
        return self._kek

    def _get_or_create_kek(self, ctx: RuleContext) -> Kek:
        reading = _mode(ctx) == "READ"
        kms_type = ctx.get_parameter(ENCRYPT_KMS_TYPE)
        kms_key_id = ctx.get_parameter(ENCRYPT_KMS_KEY_ID)
        kek_id = KekId(self._kek_name, False, _context_of(ctx.subject))
        kek = self._fetch_kek(kek_id)
        if kek is None:
            if reading:
                raise RuleError(f"no kek found for {self._kek_name} during consume")
            if not kms_type:
                raise RuleError(f"no kms type found for {self._kek_name} during produce")
            if not kms_key_id:
                raise RuleError(f"no kms key id found for {self._kek_name} during produce")
            # None: another client registered it first (409)
            kek = self._store_kek(kek_id, kms_type, kms_key_id) or self._fetch_kek(kek_id)
            if kek is None:
                raise RuleError(f"no kek found for {self._kek_name} during produce")
        if kms_type and kek.kms_type != kms_type:
            raise RuleError(
                f"found {self._kek_name} with kms type {kek.kms_type} "
                f"which differs from rule kms type {kms_type}"
            )
        if kms_key_id and kek.kms_key_id != kms_key_id:
            raise RuleError(
                f"found {self._kek_name} with kms key id {kek.kms_key_id} "
                f"which differs from rule kms key id {kms_key_id}"
            )
        return kek

    def _fetch_kek(self, kek_id: KekId) -> Kek | None:
        client = self._client()
        try:
            return client.get_kek(kek_id.name, kek_id.deleted, kek_id.context)
        except Exception as exc:
            if _status(exc) == 404:
                return None
            raise RuleError(f"could not get kek {kek_id.name}") from exc

    def _store_kek(self, kek_id: KekId, kms_type: str, kms_key_id: str) -> Kek | None:
        client = self._client()
        try:
            return client.register_kek(
                kek_id.name, kms_type, kms_key_id, False, context=kek_id.context
            )
        except Exception as exc:
            if _status(exc) == 409:
                return None
            raise RuleError(f"could not register kek {kek_id.name}") from exc

    # -- the DEK ---------------------------------------------------------------------------

    def _get_or_create_dek(self, ctx: RuleContext, version: int | None) -> Dek:
        kek = self._get_kek(ctx)
        reading = _mode(ctx) == "READ"
        dek_id = DekId(str(kek.name), ctx.subject, version or 1, self._cryptor.dek_format, reading)
        dek = self._fetch_dek(dek_id)
        expired = self._is_expired(ctx, dek)
        wrapper: AeadWrapper | None = None
        if dek is None or expired:
            if reading:
                raise RuleError(f"no dek found for {dek_id.kek_name} during consume")
            encrypted: bytes | None = None
            if not kek.shared:
                wrapper = AeadWrapper(self._rule_config(), kek)
                encrypted = wrapper.encrypt(self._cryptor.generate_key(), Cryptor.EMPTY_AAD)
            new_version = dek.version + 1 if expired and dek and dek.version else 1
            try:
                dek = self._create_dek(dek_id, new_version, encrypted)
            except RuleError:
                if dek is None:
                    raise
                log.warning(
                    "failed to create dek for %s, subject %s, version %d, using existing dek",
                    kek.name,
                    ctx.subject,
                    new_version,
                )
        if dek.get_key_material_bytes() is None:
            if wrapper is None:
                wrapper = AeadWrapper(self._rule_config(), kek)
            encrypted_key = dek.get_encrypted_key_material_bytes()
            if encrypted_key is None:
                raise RuleError(f"no key material found for dek of {kek.name}")
            dek.set_key_material(wrapper.decrypt(encrypted_key, Cryptor.EMPTY_AAD))
        return dek

    def _rule_config(self) -> dict[str, Any]:
        if self._executor.config is None:
            raise RuleError("config not found in executor")
        return self._executor.config

    def _create_dek(self, dek_id: DekId, version: int, encrypted: bytes | None) -> Dek:
        new_id = DekId(dek_id.kek_name, dek_id.subject, version, dek_id.algorithm, dek_id.deleted)
        # None: another client registered that version first (409)
        dek = self._store_dek(new_id, encrypted) or self._fetch_dek(dek_id)
        if dek is None:
            raise RuleError(f"no dek found for {dek_id.kek_name} during produce")
        return dek

    def _fetch_dek(self, key: DekId) -> Dek | None:
        client = self._client()
        try:
            dek = client.get_dek(
                key.kek_name, key.subject, key.algorithm, key.version or 1, key.deleted
            )
        except Exception as exc:
            if _status(exc) == 404:
                return None
            raise RuleError(
                f"could not get dek for kek {key.kek_name}, subject {key.subject}"
            ) from exc
        return dek if dek is not None and dek.encrypted_key_material else None

    def _store_dek(self, key: DekId, encrypted: bytes | None) -> Dek | None:
        client = self._client()
        text = base64.b64encode(encrypted).decode("utf-8") if encrypted else None
        try:
            return client.register_dek(key.kek_name, key.subject, text, key.algorithm, key.version)
        except Exception as exc:
            if _status(exc) == 409:
                return None
            raise RuleError(
                f"could not register dek for kek {key.kek_name}, subject {key.subject}"
            ) from exc

    def _is_expired(self, ctx: RuleContext, dek: Dek | None) -> bool:
        if _mode(ctx) == "READ" or self._dek_expiry_days <= 0 or dek is None:
            return False
        age_days = (self._executor.clock.now() - (dek.ts or 0)) / MILLIS_IN_DAY
        return age_days > self._dek_expiry_days

    # -- values ----------------------------------------------------------------------------

    def transform(self, ctx: RuleContext, field_type: FieldType, field_value: Any) -> Any:
        """``field_value`` encrypted (a write) or decrypted (a read).

        Raises:
            RuleError: a type other than string or bytes, no KEK or DEK, a KMS failure.
        """
        if field_value is None:
            return None
        mode = _mode(ctx)
        if mode == "WRITE":
            return self._encrypt(ctx, field_type, field_value)
        if mode == "READ":
            return self._decrypt(ctx, field_type, field_value)
        raise RuleError(f"unsupported rule mode {ctx.rule_mode}")

    def _encrypt(self, ctx: RuleContext, field_type: FieldType, value: Any) -> Any:
        plaintext = _to_bytes(field_type, value)
        if plaintext is None:
            raise RuleError(f"type {field_type} not supported for encryption")
        dek = self._get_or_create_dek(ctx, -1 if self._is_dek_rotated() else None)
        key = dek.get_key_material_bytes()
        if key is None:
            raise RuleError("no key material bytes found for dek")
        ciphertext = self._cryptor.encrypt(key, plaintext, Cryptor.EMPTY_AAD)
        if self._is_dek_rotated():
            if dek.version is None:
                raise RuleError("no version found for dek")
            ciphertext = bytes([_VERSION_MAGIC]) + dek.version.to_bytes(4, "big") + ciphertext
        if field_type == FieldType.STRING:
            return base64.b64encode(ciphertext).decode("utf-8")
        return ciphertext

    def _decrypt(self, ctx: RuleContext, field_type: FieldType, value: Any) -> Any:
        if field_type == FieldType.STRING:
            ciphertext: bytes | None = base64.b64decode(value)
        else:
            ciphertext = _to_bytes(field_type, value)
        if ciphertext is None:
            return value
        version = None
        if self._is_dek_rotated():
            if len(ciphertext) < 5:
                raise RuleError("no version found in ciphertext")
            version = int.from_bytes(ciphertext[1:5], "big")
            ciphertext = ciphertext[5:]
        dek = self._get_or_create_dek(ctx, version)
        key = dek.get_key_material_bytes()
        if key is None:
            raise RuleError("no key material bytes found for dek")
        plaintext = self._cryptor.decrypt(key, ciphertext, Cryptor.EMPTY_AAD)
        return plaintext.decode("utf-8") if field_type == FieldType.STRING else plaintext


def _to_bytes(field_type: FieldType, value: Any) -> bytes | None:
    if field_type == FieldType.STRING:
        return value.encode("utf-8")  # type: ignore[no-any-return]
    if field_type == FieldType.BYTES:
        if isinstance(value, io.BytesIO):
            return value.read()
        return bytes(value)
    return None


class AeadWrapper:
    """A KEK's AEAD through its KMS: the KEK's key id, then each alternate one
    (``encrypt.alternate.kms.key.ids``, comma-separated, from the KEK's KMS
    properties else the rule settings) until one works."""

    def __init__(self, config: dict[str, Any], kek: Kek) -> None:
        self._config = config
        self._kek = kek
        self._kms_key_ids = self._get_kms_key_ids()

    def encrypt(self, plaintext: bytes, associated_data: bytes) -> bytes:
        """``plaintext`` encrypted by the KEK.

        Raises:
            RuleError: no key id worked.
        """
        return self._each_key("encrypt", plaintext, associated_data)

    def decrypt(self, ciphertext: bytes, associated_data: bytes) -> bytes:
        """``ciphertext`` decrypted by the KEK.

        Raises:
            RuleError: no key id worked.
        """
        return self._each_key("decrypt", ciphertext, associated_data)

    def _each_key(self, op: str, data: bytes, associated_data: bytes) -> bytes:
        last: Exception | None = None
        for kms_key_id in self._kms_key_ids:
            try:
                if self._kek.kms_type is None:
                    raise RuleError("no kms type found for kek")
                primitive = self._get_aead(self._config, self._kek.kms_type, kms_key_id)
                return getattr(primitive, op)(data, associated_data)  # type: ignore[no-any-return]
            except Exception as exc:
                log.warning(
                    "failed to %s with kek %s and kms key id %s", op, self._kek.name, kms_key_id
                )
                last = exc
        raise RuleError(f"failed to {op} with all KEKs for {self._kek.name}") from last

    def _get_kms_key_ids(self) -> list[str]:
        ids = [str(self._kek.kms_key_id)]
        alternates = None
        if self._kek.kms_props is not None:
            alternates = self._kek.kms_props.properties.get(ENCRYPT_ALTERNATE_KMS_KEY_IDS)
        if alternates is None:
            alternates = self._config.get(ENCRYPT_ALTERNATE_KMS_KEY_IDS)
        if alternates is not None:
            ids.extend(part.strip() for part in str(alternates).split(",") if part.strip())
        return ids

    def _get_aead(self, config: dict[str, Any], kms_type: str, kms_key_id: str) -> Any:
        kek_url = f"{kms_type}://{kms_key_id}"
        settings = dict(config)
        if self._kek.kms_props is not None:
            settings.update(self._kek.kms_props.properties)
        return self._get_kms_client(settings, kek_url).get_aead(kek_url)

    def _get_kms_client(self, config: dict[str, Any], kek_url: str) -> KmsClient:
        driver = get_kms_driver(kek_url)
        try:
            return kms_client_from_uri(kek_url)
        except TinkError:
            return self._register_kms_client(driver, config, kek_url)

    @staticmethod
    def _register_kms_client(driver: KmsDriver, config: dict[str, Any], kek_url: str) -> KmsClient:
        client = driver.new_kms_client(config, kek_url)
        register_kms_client(client)
        return client


class FieldEncryptionExecutor(FieldRuleExecutor):
    """Runs ``ENCRYPT`` rules on the string and bytes fields the rule's tags select."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.executor = EncryptionExecutor(clock)

    def configure(self, client_conf: dict[str, Any], rule_conf: dict[str, Any]) -> None:
        self.executor.configure(client_conf, rule_conf)

    def type(self) -> str:
        return "ENCRYPT"

    def new_transform(self, ctx: RuleContext) -> FieldTransform:
        return FieldEncryptionExecutorTransform(self.executor.new_transform(ctx)).transform

    def close(self) -> None:
        self.executor.close()

    @classmethod
    def register(cls) -> None:
        """Add an executor to the global rule registry."""
        RuleRegistry.register_rule_executor(cls())

    @classmethod
    def register_with_clock(cls, clock: Clock) -> FieldEncryptionExecutor:
        """Add an executor measuring time with ``clock``; the executor."""
        executor = cls(clock)
        RuleRegistry.register_rule_executor(executor)
        return executor


class FieldEncryptionExecutorTransform:
    """An ``ENCRYPT`` rule's per-field transform."""

    def __init__(self, executor_transform: EncryptionExecutorTransform) -> None:
        self.executor_transform = executor_transform

    def transform(self, ctx: RuleContext, field_ctx: FieldContext, field_value: Any) -> Any:
        return self.executor_transform.transform(ctx, field_ctx.field_type, field_value)
