"""The record-encryption filter: record values of chosen topics encrypted on
their way to the brokers, decrypted on their way back to consumers.

``RecordEncryption`` encrypts, in each Produce request, the values of the
records of every topic its ``topics`` table names (by pattern), with AES-256-GCM
under a data key (DEK) that a key-encryption key (KEK) in a KMS wraps
(envelope encryption); each value becomes a frame (:mod:`.frame`) naming the
KEK, its version and the wrapped DEK. In each Fetch answer, every value that
is such a frame is decrypted, whatever its topic.

Rules:

* Place: a filter of the user's, so before key routing on requests (the
  proxy's default chain). Routing hashes keys, which stay in the clear, and
  moves the encrypted batches as any other; its journal holds ciphertext only.
  On answers it comes after routing: consumers get plaintext.
* Produce: batches are rebuilt as :mod:`.records` says (producer id, epoch and
  sequence, compression, timestamps, keys and headers kept), so idempotent and
  transactional producers go on as before. A partition that cannot be
  encrypted (a batch that does not decode, a legacy message set, a KEK the KMS
  refuses) gets ``INVALID_RECORD`` with the reason; a KMS that does not answer
  gets ``REQUEST_TIMED_OUT`` (retriable: the producer sends the batch again);
  nothing of the partition is forwarded, the request's other partitions are.
  With ``acks=0`` such a refusal closes the client's connection instead.
* Fetch: a partition whose first batch cannot be decrypted (a frame that does
  not parse, a KEK or version the KMS refuses, ciphertext that does not
  authenticate) answers ``CORRUPT_MESSAGE`` with no records, and the proxy logs
  why (at most once a minute per reason); a later batch that cannot be
  decrypted ends the partition's records before it, so a consumer reads
  everything up to it and then gets the error. Never ciphertext in place of
  plaintext. A DEK not yet unwrapped by a KMS that is not local (AWS) is
  unwrapped on a worker thread while the partition answers the batches before
  it (possibly none, without error): the client fetches again, from there.
* DEKs are reused within bounds (:mod:`.keys`), so the KMS is called once per
  DEK, not per record. A reload (SIGHUP) with new settings drops the
  encrypting DEKs: the next records use the KEK's newest version.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import trio

from trafka.codec import ApiKey, ErrorCode
from trafka.codec.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from trafka.codec.messages.k00_produce import ProduceResponse
from trafka.sdk import ConfigError

from ..filters import (
    CLIENT_KEYS,
    CloseConnection,
    EncodedBody,
    Filter,
    FilterContext,
    ProxyServices,
    Respond,
    Sample,
)
from .frame import key_prefix
from .keys import Deks, Lease
from .kms import Kms, KmsError, KmsRefused, KmsUnavailable
from .records import Pending, Refused, Unreadable, decrypt_blob, encrypt_blob, records_in

__all__ = ["EncryptionStats", "RecordEncryption"]

log = logging.getLogger("trafka.proxy.encryption")

_SETTINGS = {
    "kms": "keyfile or aws",
    "key_file": "the key file (kms = keyfile)",
    "topics": "a table: topic pattern = KEK id",
    "aws_region": "the AWS region (kms = aws)",
    "aws_endpoint_url": "another AWS KMS endpoint",
    "aws_access_key_id": "AWS credentials (default: boto3's chain)",
    "aws_secret_access_key": "AWS credentials",
    "kms_timeout_s": "each KMS call's timeout",
    "dek_max_records": "records encrypted with one DEK at most",
    "dek_max_age_s": "seconds one DEK encrypts at most",
    "encrypt_keys": "topic patterns whose record keys are encrypted too (deterministically)",
}
# A request this large is encrypted on a worker thread, off the event loop.
_THREAD_BYTES = 64 << 10
_Partition = ProduceResponse.PartitionProduceResponse
NULL_UUID = uuid.UUID(int=0)
# Refused Produce partitions: (topic name, or id, partition) -> (error code, why).
_Refused = dict[tuple[str | uuid.UUID, int], tuple[int, str]]


@dataclasses.dataclass(slots=True)
class EncryptionStats:
    """The filter's counters (``RunningProxy.statistics.filters['encryption']``)."""

    records_encrypted: int = 0
    partitions_decrypted: int = 0
    partitions_refused: int = 0
    partitions_unreadable: int = 0
    deks_made: int = 0
    deks_unwrapped: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class _Config:
    kms: Kms
    kms_settings: tuple[tuple[str, Any], ...]
    rules: tuple[tuple[re.Pattern[str], str], ...]
    key_rules: tuple[re.Pattern[str], ...] = ()


class RecordEncryption(Filter):
    """Encrypt record values of chosen topics with a KMS's keys (see the module doc).

    Args:
        settings: as the ``[[filter]]`` entry's settings table (docs/proxy.md,
            "Record encryption"); or give them through :meth:`configure`.
    """

    api_keys = frozenset({ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SHARE_FETCH, ApiKey.METADATA})

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        self._config: _Config | None = None
        self._deks = Deks()
        self._keks: dict[str, str | None] = {}
        self._unwrapping: set[bytes] = set()
        self._key_sealers: dict[str, Any] = {}  # KEK id -> its keys' sealer
        self._key_readers: dict[bytes, Any] = {}  # key frame prefix -> AES-SIV
        self._names: dict[uuid.UUID, str] = {}  # topic ids Metadata answers named
        self._services: ProxyServices | None = None
        self.stats = EncryptionStats()
        if settings is not None:
            self.configure(settings)

    # -- settings ------------------------------------------------------------------------

    def configure(self, settings: Mapping[str, Any]) -> None:
        """Take the settings (docs/proxy.md, "Record encryption").

        Raises:
            ConfigError: every problem found at once (an unknown setting with
                the nearest known name, a missing or wrong one, a KEK the key
                file lacks).
        """
        conf = {key.replace(".", "_"): value for key, value in settings.items()}
        problems = [
            f"unknown setting {key!r}{_nearest(key)}" for key in conf if key not in _SETTINGS
        ]
        rules = _rules(conf.get("topics"), problems)
        key_rules = _patterns(conf.get("encrypt_keys", []), problems)
        if key_rules and conf.get("kms") == "aws":
            problems.append(
                "encrypt_keys: record keys need kms = keyfile (AWS KMS holds its keys' bytes)"
            )
        kind = conf.get("kms")
        if kind not in ("keyfile", "aws"):
            problems.append(f"kms: {kind!r} is not 'keyfile' or 'aws'")
        numbers = {}
        for name, default in (
            ("dek_max_records", 5_000_000),
            ("dek_max_age_s", 3600),
            ("kms_timeout_s", 5),
        ):
            value = conf.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                problems.append(f"{name}: {value!r} is not a positive number")
            numbers[name] = value
        if kind == "aws" and not conf.get("aws_region"):
            problems.append("missing setting 'aws_region' (kms = aws)")
        kms_settings = tuple(
            sorted(
                (k, v)
                for k, v in conf.items()
                if k == "kms" or k.startswith(("key_", "aws_", "kms_"))
            )
        )
        kms: Kms | None = None
        old = self._config
        if kind in ("keyfile", "aws") and (kind == "keyfile" or conf.get("aws_region")):
            if old is not None and old.kms_settings == kms_settings:
                kms = old.kms
            else:
                kms = _make_kms(conf, problems)
        if kms is not None:
            for _, kek in rules:
                if "{topic}" not in kek and (why := kms.check(kek)):
                    problems.append(f"topics: {why}")
        if problems:
            if kms is not None and (old is None or kms is not old.kms):
                kms.close()
            raise ConfigError("RecordEncryption: " + "; ".join(problems), problems)
        assert kms is not None
        self._deks.max_records = int(numbers["dek_max_records"])
        self._deks.max_age = float(numbers["dek_max_age_s"])
        self._config = _Config(kms, kms_settings, tuple(rules), tuple(key_rules))
        self._keks = {}
        self._key_sealers = {}
        self._deks.forget()  # a new KEK version wraps the next DEKs
        if old is not None and old.kms is not kms:
            old.kms.close()

    def attach(self, services: ProxyServices) -> None:
        """Refuses to start unconfigured: a proxy that should encrypt must not
        forward plaintext because its settings were forgotten.

        Raises:
            ValueError: no settings were given (constructor or :meth:`configure`).
        """
        if self._config is None:
            raise ValueError("RecordEncryption has no settings (give them, or configure() it)")
        self._services = services

    def detach(self) -> None:
        if self._config is not None:
            self._config.kms.close()

    def statistics(self) -> Mapping[str, Any]:
        return {"encryption": self.stats}

    def samples_by_name(self) -> dict[str, float]:
        """The counters of :meth:`samples`, by short name."""
        return {s.family.removeprefix("trafka_proxy_encryption_"): s.value for s in self.samples()}

    def samples(self) -> Iterable[Sample]:
        s = self.stats
        s.deks_made, s.deks_unwrapped = self._deks.made, self._deks.unwrapped
        for name, value, what in (
            ("records_encrypted", s.records_encrypted, "record values encrypted"),
            ("partitions_decrypted", s.partitions_decrypted, "fetched partitions decrypted"),
            ("partitions_refused", s.partitions_refused, "produce partitions refused"),
            ("partitions_unreadable", s.partitions_unreadable, "fetched partitions not decrypted"),
            ("deks_made", s.deks_made, "data keys made by the KMS"),
            ("deks_unwrapped", s.deks_unwrapped, "data keys unwrapped by the KMS"),
        ):
            yield Sample(
                f"trafka_proxy_encryption_{name}", f"Record encryption: {what}.", (), value
            )

    def keys_encrypted(self, topic: str) -> bool:
        """Whether ``topic``'s record keys are encrypted too (``encrypt_keys``)."""
        return self._config is not None and any(p.fullmatch(topic) for p in self._config.key_rules)

    def _key_sealer(self, kek: str) -> Any:
        """``seal(key) -> key frame`` under the KEK's first version (see :mod:`.frame`)."""
        sealer = self._key_sealers.get(kek)
        if sealer is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESSIV

            assert self._config is not None
            try:
                version, key = self._config.kms.key_key(kek, None)
            except KmsError as exc:
                raise Refused(str(exc)) from None
            pre, siv = key_prefix(kek, version), AESSIV(key)

            def sealer(plain: bytes) -> bytes:
                return pre + siv.encrypt(plain, [pre])

            self._key_sealers[kek] = sealer
        return sealer

    def _key_reader(self, prefix: bytes, kek_id: str, kek_version: str) -> Any:
        siv = self._key_readers.get(prefix)
        if siv is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESSIV

            assert self._config is not None
            try:
                siv = AESSIV(self._config.kms.key_key(kek_id, kek_version)[1])
            except KmsError as exc:
                raise Unreadable(str(exc)) from None
            if len(self._key_readers) >= 1000:
                self._key_readers.clear()
            self._key_readers[prefix] = siv
        return siv

    def kek_for(self, topic: str | None) -> str | None:
        """The KEK that encrypts ``topic``'s records (None: not encrypted)."""
        if topic is None or self._config is None:
            return None
        if topic not in self._keks:
            found = next((kek for p, kek in self._config.rules if p.fullmatch(topic)), None)
            self._keks[topic] = None if found is None else found.replace("{topic}", topic)
        return self._keks[topic]

    # -- Produce ---------------------------------------------------------------------------

    async def on_request(self, ctx: FilterContext, body: Any) -> Any:
        if ctx.api_key != ApiKey.PRODUCE:
            return body
        todo: dict[tuple[int, int], tuple[str, int]] = {}
        refused: _Refused = {}
        for ti, t in enumerate(body.topic_data):
            name = t.name or self._names.get(t.topic_id)
            if name is None and t.topic_id != NULL_UUID:
                # Produce v13 names topics by id (KIP-516): one this proxy has
                # not seen in a Metadata answer may be one to encrypt. The
                # client refreshes its metadata (through the proxy) and retries.
                for p in t.partition_data:
                    refused[(t.topic_id, p.index)] = (
                        ErrorCode.UNKNOWN_TOPIC_ID,
                        f"topic id {t.topic_id} not known to the proxy yet",
                    )
                continue
            kek = self.kek_for(name)
            if kek is None:
                continue
            for pi, p in enumerate(t.partition_data):
                try:
                    todo[(ti, pi)] = (kek, records_in(p.records))
                except Refused as exc:
                    refused[(_topic(t), p.index)] = (ErrorCode.INVALID_RECORD, str(exc))
        if not todo and not refused:
            return body
        leases = await self._leases(todo, body, refused)
        size = sum(len(p.records or b"") for t in body.topic_data for p in t.partition_data)
        work = [(key, kek) for key, (kek, _) in todo.items() if kek in leases]
        keys: dict[bytes, bytes] = ctx.notes.setdefault(CLIENT_KEYS, {})
        if size >= _THREAD_BYTES:
            done = await trio.to_thread.run_sync(self._encrypt, body, work, leases, refused, keys)
        else:
            done = self._encrypt(body, work, leases, refused, keys)
        if not keys:
            del ctx.notes[CLIENT_KEYS]
        return self._refusing(ctx, body, done, refused)

    async def _leases(
        self,
        todo: Mapping[tuple[int, int], tuple[str, int]],
        body: Any,
        refused: _Refused,
    ) -> dict[str, tuple[Lease, list[int]]]:
        """A lease per KEK for all its records in the request (a new DEK from
        the KMS where needed); a KEK the KMS fails refuses its partitions."""
        need: dict[str, int] = {}
        for kek, n in todo.values():
            need[kek] = need.get(kek, 0) + n
        assert self._config is not None
        kms = self._config.kms
        leases: dict[str, tuple[Lease, list[int]]] = {}
        for kek, n in need.items():
            now = trio.current_time()
            lease = self._deks.lease(kek, n, now)
            if lease is None:
                try:
                    with trio.fail_after(30):
                        dek, version, wrapped = await trio.to_thread.run_sync(kms.new_dek, kek)
                except (KmsError, trio.TooSlowError) as exc:
                    code = (
                        ErrorCode.INVALID_RECORD
                        if isinstance(exc, KmsRefused)
                        else ErrorCode.REQUEST_TIMED_OUT
                    )
                    why = str(exc) or "the KMS did not answer in 30 s"
                    self._quiet("kms", "record encryption: no data key for KEK %r: %s", kek, why)
                    for (ti, pi), (k, _) in todo.items():
                        if k == kek:
                            t = body.topic_data[ti]
                            refused[(_topic(t), t.partition_data[pi].index)] = (code, why)
                    continue
                lease = self._deks.install(kek, dek, version, wrapped, now, n)
            leases[kek] = (lease, [0])
        return leases

    def _encrypt(
        self,
        body: Any,
        work: list[tuple[tuple[int, int], str]],
        leases: Mapping[str, tuple[Lease, list[int]]],
        refused: _Refused,
        keys: dict[bytes, bytes],
    ) -> dict[tuple[int, int], bytes]:
        """The encrypted records of each partition of ``work``; each key frame
        made, with its client's key, in ``keys`` (:data:`~..filters.CLIENT_KEYS`)."""
        done: dict[tuple[int, int], bytes] = {}
        for (ti, pi), kek in work:
            t = body.topic_data[ti]
            p = t.partition_data[pi]
            lease, used = leases[kek]
            try:
                name = t.name or self._names.get(t.topic_id, "")
                seal_key = (
                    _remembered(self._key_sealer(kek), keys) if self.keys_encrypted(name) else None
                )
                blob, n = encrypt_blob(
                    p.records, lease, used[0], DEFAULT_MAX_DECOMPRESSED_SIZE, seal_key
                )
            except Refused as exc:
                refused[(_topic(t), p.index)] = (ErrorCode.INVALID_RECORD, str(exc))
                continue
            used[0] += n
            self.stats.records_encrypted += n
            done[(ti, pi)] = blob
        return done

    def _refusing(
        self,
        ctx: FilterContext,
        body: Any,
        done: Mapping[tuple[int, int], bytes],
        refused: _Refused,
    ) -> Any:
        if refused:
            self.stats.partitions_refused += len(refused)
            if body.acks == 0:
                names = ", ".join(f"{t}-{p}" for t, p in refused)
                raise CloseConnection(f"record encryption refused {names} of an acks=0 produce")
            ctx.notes["encryption_refused"] = dict(refused)
        topics = []
        for ti, t in enumerate(body.topic_data):
            parts = []
            for pi, p in enumerate(t.partition_data):
                if (_topic(t), p.index) in refused:
                    continue
                blob = done.get((ti, pi))
                parts.append(p if blob is None else dataclasses.replace(p, records=blob))
            if parts:
                topics.append(dataclasses.replace(t, partition_data=parts))
        if not topics:
            return Respond(_with_refused(ProduceResponse(responses=[]), refused))
        return dataclasses.replace(body, topic_data=topics)

    # -- answers ---------------------------------------------------------------------------

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        if ctx.api_key == ApiKey.METADATA:
            for t in body.topics:  # topic ids, for Produce v13's (see on_request)
                if t.name and t.topic_id != NULL_UUID and not t.error_code:
                    self._names[t.topic_id] = t.name
            return body
        if ctx.api_key == ApiKey.PRODUCE:
            refused = ctx.notes.get("encryption_refused")
            if not refused:
                return body
            if isinstance(body, EncodedBody):
                from trafka.codec import protocol

                body = protocol.decode_response_body(ApiKey.PRODUCE, ctx.api_version, body.data)
            return _with_refused(body, refused)
        return self._decrypted(body, share=ctx.api_key == ApiKey.SHARE_FETCH)

    def _decrypted(self, body: Any, share: bool = False) -> Any:
        """A Fetch (or ShareFetch) answer with its frames decrypted (the module's rules)."""
        now = trio.current_time()
        topics, changed = [], False
        for t in body.responses:
            parts = []
            for p in t.partitions:
                if not p.records or p.error_code:
                    parts.append(p)
                    continue
                blob, stop = decrypt_blob(
                    p.records,
                    lambda *a: self._reader(now, share, *a),
                    DEFAULT_MAX_DECOMPRESSED_SIZE,
                    self._key_reader,
                )
                if blob is None and stop is None:
                    parts.append(p)
                    continue
                changed = True
                self.stats.partitions_decrypted += 1
                if isinstance(stop, Unreadable):
                    where = (
                        f"{getattr(t, 'topic', None) or t.topic_id} partition {p.partition_index}"
                    )
                    self._quiet(str(stop)[:60], "record encryption: %s: %s", where, stop)
                    if share or not blob:
                        self.stats.partitions_unreadable += 1
                        parts.append(_unreadable(p, share, str(stop)))
                        continue
                parts.append(dataclasses.replace(p, records=blob))
            topics.append(dataclasses.replace(t, partitions=parts))
        return dataclasses.replace(body, responses=topics) if changed else body

    def _reader(
        self, now: float, block: bool, prefix: bytes, kek_id: str, kek_version: str, wrapped: bytes
    ) -> Any:
        aead = self._deks.reader(prefix)
        if aead is not None:
            return aead
        why = self._deks.refused(prefix, now)
        if why is not None:
            raise Unreadable(why)
        assert self._config is not None
        kms = self._config.kms
        if kms.inline or block:
            try:
                return self._deks.learn(prefix, kms.unwrap(kek_id, kek_version, wrapped))
            except KmsRefused as exc:
                self._deks.refuse(prefix, str(exc), now)
                raise Unreadable(str(exc)) from None
            except KmsError as exc:
                raise Unreadable(str(exc)) from None
        if prefix not in self._unwrapping and self._services is not None:
            self._unwrapping.add(prefix)
            self._services.nursery.start_soon(
                self._unwrap, kms, prefix, kek_id, kek_version, wrapped
            )
        raise Pending(prefix)

    async def _unwrap(
        self, kms: Kms, prefix: bytes, kek_id: str, kek_version: str, wrapped: bytes
    ) -> None:
        try:
            with trio.fail_after(30):
                dek = await trio.to_thread.run_sync(kms.unwrap, kek_id, kek_version, wrapped)
            self._deks.learn(prefix, dek)
        except KmsRefused as exc:
            self._deks.refuse(prefix, str(exc), trio.current_time())
        except (KmsUnavailable, trio.TooSlowError) as exc:
            self._quiet(
                "unwrap", "record encryption: KEK %r: cannot unwrap a DEK yet: %s", kek_id, exc
            )
        finally:
            self._unwrapping.discard(prefix)

    def _quiet(self, key: str, msg: str, *args: object) -> None:
        if self._services is not None:
            self._services.quiet.warning(("encryption", key), msg, *args)
        else:
            log.warning(msg, *args)


def _unreadable(p: Any, share: bool, why: str) -> Any:
    """A fetched partition answered CORRUPT_MESSAGE, without records (a share
    fetch's acquired records too: they go back to the group when their
    acquisition lock ends, and are archived after the group's delivery limit)."""
    if share:
        return dataclasses.replace(
            p,
            error_code=ErrorCode.CORRUPT_MESSAGE,
            error_message=f"record encryption: {why}",
            records=b"",
            acquired_records=[],
        )
    return dataclasses.replace(p, error_code=ErrorCode.CORRUPT_MESSAGE, records=b"")


def _patterns(given: Any, problems: list[str]) -> list[re.Pattern[str]]:
    if isinstance(given, str) or not isinstance(given, list | tuple):
        problems.append(f"encrypt_keys: {given!r} is not a list of topic patterns")
        return []
    out = []
    for pattern in given:
        try:
            out.append(re.compile(pattern))
        except (re.error, TypeError) as exc:
            problems.append(f"encrypt_keys: {pattern!r} is not a regular expression: {exc}")
    return out


def _rules(table: Any, problems: list[str]) -> list[tuple[re.Pattern[str], str]]:
    if table is None:
        problems.append("missing setting 'topics' (a table: topic pattern = KEK id)")
        return []
    if not isinstance(table, Mapping) or not table:
        problems.append(f"topics: {table!r} is not a table of topic pattern = KEK id")
        return []
    rules = []
    for pattern, kek in table.items():
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            problems.append(f"topics: {pattern!r} is not a regular expression: {exc}")
            continue
        if not isinstance(kek, str) or not kek or len(kek.encode()) > 200:
            problems.append(f"topics: {pattern!r}: the KEK id {kek!r} is not a name of 1-200 bytes")
            continue
        rules.append((compiled, kek))
    return rules


def _make_kms(conf: Mapping[str, Any], problems: list[str]) -> Kms | None:
    try:
        if conf["kms"] == "keyfile":
            from .kms import KeyFileKms

            if not conf.get("key_file"):
                problems.append("missing setting 'key_file' (kms = keyfile)")
                return None
            return KeyFileKms(str(conf["key_file"]))
        from .aws import AwsKms

        return AwsKms(
            str(conf["aws_region"]),
            endpoint_url=conf.get("aws_endpoint_url"),
            access_key_id=conf.get("aws_access_key_id"),
            secret_access_key=conf.get("aws_secret_access_key"),
            timeout=float(conf.get("kms_timeout_s", 5)),
        )
    except ValueError as exc:
        problems.append(str(exc))
        return None


def _nearest(key: str) -> str:
    close = difflib.get_close_matches(key, list(_SETTINGS), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _topic(t: Any) -> str | uuid.UUID:
    """How a Produce request names a topic: by name, or (v13) by id."""
    return t.name or t.topic_id  # type: ignore[no-any-return]


def _with_refused(body: Any, refused: Mapping[tuple[str | uuid.UUID, int], tuple[int, str]]) -> Any:
    """A Produce answer with the refused partitions' answers added."""
    topics: dict[str | uuid.UUID, list[Any]] = {
        _topic(t): list(t.partition_responses) for t in body.responses
    }
    for (topic, partition), (code, why) in sorted(refused.items(), key=lambda r: str(r[0])):
        topics.setdefault(topic, []).append(
            _Partition(
                index=partition,
                error_code=code,
                base_offset=-1,
                log_append_time_ms=-1,
                log_start_offset=-1,
                error_message=f"record encryption: {why}",
            )
        )
    by_topic = {_topic(t): t for t in body.responses}
    answer = ProduceResponse.TopicProduceResponse
    return dataclasses.replace(
        body,
        responses=[
            dataclasses.replace(by_topic[n], partition_responses=ps)
            if n in by_topic
            else answer(topic_id=n, partition_responses=ps)
            if isinstance(n, uuid.UUID)
            else answer(name=n, partition_responses=ps)
            for n, ps in topics.items()
        ],
    )


def _remembered(
    seal: Callable[[bytes], bytes], keys: dict[bytes, bytes]
) -> Callable[[bytes], bytes]:
    """``seal``, each frame it makes kept in ``keys`` with the key it sealed."""

    def sealing(key: bytes) -> bytes:
        frame = seal(key)
        keys[frame] = key
        return frame

    return sealing
