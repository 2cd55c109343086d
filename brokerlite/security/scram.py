"""SCRAM credentials managed through the admin API (KIP-554), durable in the data directory.

DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51)
are answered here, sans-IO, as Kafka's controller answers them (its
``ScramControlManager`` and ``ScramImage``). The SCRAM logins of the SASL
listener look their credentials up here too (:meth:`ScramCredentials.lookup`).

Where credentials come from:

* The configuration (``sasl_users``, ``sasl_users_file``): derived when the
  broker starts, for each enabled SCRAM mechanism (:class:`.sasl.UserStore`).
* The API: a change is kept per ``(user, mechanism)`` in a journal
  (:class:`ScramCredentialStore`) and wins over the configuration: an upserted
  credential replaces the configured one, a deletion hides it. A deletion of a
  credential the configuration does not give simply forgets the API's.
* Cluster mode: ZooKeeper holds the API's credentials
  (:mod:`.zk_scram`), not the journal: the handler checks a request here
  (:meth:`ScramCredentials.check_alter`), the cluster driver writes it, and
  every broker takes what ZooKeeper holds (:meth:`ScramCredentials.use_cluster`).
  A deletion there removes ZooKeeper's credential only (a configured one for
  the same user and mechanism applies again).

Rules and invariants:

* Only derived keys are stored (salt, iterations, StoredKey, ServerKey), never a
  password nor the salted password a client sends; neither is ever logged.
* An AlterUserScramCredentials request is written as one journal entry (one
  CRC), so a crash keeps all of its changes or none; the answer comes after the
  write (fsynced), and new logins see the change at once. Logins already done
  are not affected (Kafka does not end sessions either).
* Per request, as Kafka's controller: a user named twice (deletions and
  upsertions together, whatever the mechanisms) is DUPLICATE_RESOURCE and none
  of its changes is made; an empty name is UNACCEPTABLE_CREDENTIAL; a mechanism
  other than 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512) is
  UNSUPPORTED_SASL_MECHANISM; iterations outside 4096-16384 are
  UNACCEPTABLE_CREDENTIAL; deleting a credential that does not exist is
  RESOURCE_NOT_FOUND. A user's first error is the one reported. Other users'
  changes are made.
* An empty salted password is UNACCEPTABLE_CREDENTIAL (Kafka fails it with
  UNKNOWN_SERVER_ERROR, from its HMAC refusing an empty key).
* Describe with a null or empty list lists every user having a credential;
  a user named twice is DUPLICATE_RESOURCE, an unknown one RESOURCE_NOT_FOUND.
* Results come one per user, in the order the request first names them (all
  users: by name); credentials by mechanism number.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k50_describe_user_scram_credentials as describe_msg
from trafka.codec.messages import k51_alter_user_scram_credentials as alter_msg
from trafka.codec.sasl import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISM_NAMES,
    SCRAM_MECHANISM_TYPES,
    ScramCredential,
)

from ..errors import BrokerError
from ..storage.journal import CrcJournal, JournalStore
from .sasl import UserStore

__all__ = [
    "SCRAM_JOURNAL",
    "alter_response",
    "log_changes",
    "ScramCredentialStore",
    "ScramCredentials",
    "ScramStoreError",
]

log = logging.getLogger("trafka.brokerlite")

SCRAM_JOURNAL = "trafka-scram.journal"
_FORMAT = "scram-credentials"
_FORMAT_VERSION = 1

Key = tuple[str, str]  # (user, mechanism name)

DescribeResult = (
    describe_msg.DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
)
CredentialInfo = describe_msg.DescribeUserScramCredentialsResponse.CredentialInfo
AlterResult = alter_msg.AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


class ScramStoreError(BrokerError):
    """The SCRAM credential journal could not be read or written."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


class ScramCredentialStore(JournalStore):
    """The API's SCRAM changes, per ``(user, mechanism)``: a credential, or None
    for a deletion that hides the configuration's credential.

    Journal entries (a :class:`~..storage.journal.CrcJournal` of format
    ``scram-credentials``): ``{"kind": "alter", "changes": [...]}``, each change
    ``{"op": "set", "user", "mechanism", "salt", "iterations", "stored_key",
    "server_key"}`` (binary values in base64), ``{"op": "hide", "user",
    "mechanism"}`` or ``{"op": "forget", "user", "mechanism"}``.

    Args:
        path: the journal file; its directory is created if missing.
        fsync: fsync every write.
        compact_min_bytes: never compact a journal smaller than this.

    Raises:
        ScramStoreError: the journal cannot be read or written.
    """

    def __init__(
        self, path: Path, *, fsync: bool = True, compact_min_bytes: int = 64 * 1024
    ) -> None:
        journal = CrcJournal(
            Path(path),
            format_name=_FORMAT,
            version=_FORMAT_VERSION,
            fsync=fsync,
            error=ScramStoreError,
        )
        super().__init__(journal, compact_min_bytes=compact_min_bytes, name="SCRAM journal")
        self._changes: dict[Key, ScramCredential | None] = {}
        self._load()

    def changes(self) -> Mapping[Key, ScramCredential | None]:
        """The changes in force (a read-only view)."""
        return self._changes

    def alter(
        self,
        sets: Iterable[tuple[str, ScramCredential]] = (),
        hides: Iterable[Key] = (),
        forgets: Iterable[Key] = (),
    ) -> None:
        """Write one request's changes as one entry, then apply them.

        Raises:
            ScramStoreError: the write failed; nothing changed.
        """
        changes: list[dict[str, Any]] = [_set_json(user, cred) for user, cred in sets]
        changes += [{"op": "hide", "user": u, "mechanism": m} for u, m in hides]
        changes += [{"op": "forget", "user": u, "mechanism": m} for u, m in forgets]
        if changes:
            self._write({"kind": "alter", "changes": changes})

    def _apply(self, entry: dict[str, Any]) -> None:
        kind = entry.get("kind")
        if kind != "alter":
            raise ScramStoreError(
                f"SCRAM journal {self.path}: unknown entry kind {kind!r} "
                "(written by a newer brokerlite?)"
            )
        try:
            for change in entry["changes"]:
                op, key = change["op"], (change["user"], change["mechanism"])
                if not isinstance(key[0], str) or key[1] not in SCRAM_MECHANISM_TYPES:
                    raise ValueError(f"bad user or mechanism {key!r}")
                if op == "set":
                    self._changes[key] = ScramCredential(
                        mechanism=key[1],
                        salt=_unb64(change["salt"]),
                        iterations=int(change["iterations"]),
                        stored_key=_unb64(change["stored_key"]),
                        server_key=_unb64(change["server_key"]),
                    )
                elif op == "hide":
                    self._changes[key] = None
                elif op == "forget":
                    self._changes.pop(key, None)
                else:
                    raise ValueError(f"unknown change {op!r}")
        except (KeyError, TypeError, ValueError) as exc:
            # The CRC matched: not a torn write but an entry this code cannot read.
            raise ScramStoreError(f"SCRAM journal {self.path}: malformed entry: {exc}") from exc

    def _live_entries(self) -> list[dict[str, Any]]:
        changes: list[dict[str, Any]] = []
        for (user, mechanism), credential in self._changes.items():
            if credential is None:
                changes.append({"op": "hide", "user": user, "mechanism": mechanism})
            else:
                changes.append(_set_json(user, credential))
        return [{"kind": "alter", "changes": changes}] if changes else []


def _set_json(user: str, credential: ScramCredential) -> dict[str, Any]:
    return {
        "op": "set",
        "user": user,
        "mechanism": credential.mechanism,
        "salt": _b64(credential.salt),
        "iterations": credential.iterations,
        "stored_key": _b64(credential.stored_key),
        "server_key": _b64(credential.server_key),
    }


class ScramCredentials:
    """Every SCRAM credential the broker knows: the configuration's, changed by the API's.

    Args:
        store: the API's changes (durable).
        configured: the configuration's credentials, by mechanism then user.
    """

    def __init__(
        self,
        store: ScramCredentialStore,
        configured: Mapping[str, Mapping[str, ScramCredential]] | None = None,
    ) -> None:
        self.store = store
        self._configured = {m: dict(users) for m, users in (configured or {}).items()}
        #: Cluster mode: the credentials ZooKeeper holds, in place of the journal's.
        self._cluster: dict[Key, ScramCredential] | None = None

    def use_cluster(self, credentials: Mapping[Key, ScramCredential]) -> None:
        """Cluster mode: from now on the API's credentials are ``credentials`` (what
        ZooKeeper holds), over the configuration's; the journal is not used."""
        self._cluster = dict(credentials)

    def _changes(self) -> Mapping[Key, ScramCredential | None]:
        return self.store.changes() if self._cluster is None else self._cluster

    @classmethod
    def open(cls, path: Path, users: UserStore | None = None) -> ScramCredentials:
        """Open the journal at ``path`` over the configured credentials of ``users``
        (a :class:`.sasl.UserStore`, or None without SASL), and make ``users``
        look its SCRAM credentials up here from now on.

        Raises:
            ScramStoreError: the journal cannot be read.
        """
        store = ScramCredentialStore(path)
        scram = cls(store, users.configured_scram() if users is not None else None)
        if users is not None:
            users.manage_scram(scram)
        return scram

    def close(self) -> None:
        """Close the journal."""
        self.store.close()

    # -- reading ------------------------------------------------------------------------------

    def lookup(self, mechanism: str, user: str) -> ScramCredential | None:
        """The credential ``user`` logs in with by ``mechanism``; None when it has none."""
        changes = self._changes()
        key = (user, mechanism)
        if key in changes:
            return changes[key]
        return self._configured.get(mechanism, {}).get(user)

    def credentials(self) -> dict[str, dict[str, ScramCredential]]:
        """Every user's credentials, by user then mechanism name."""
        out: dict[str, dict[str, ScramCredential]] = {}
        for mechanism, users in self._configured.items():
            for user, credential in users.items():
                out.setdefault(user, {})[mechanism] = credential
        for (user, mechanism), change in self._changes().items():
            if change is not None:
                out.setdefault(user, {})[mechanism] = change
            else:
                known = out.get(user)
                if known is not None:
                    known.pop(mechanism, None)
                    if not known:
                        del out[user]
        return out

    # -- DescribeUserScramCredentials ---------------------------------------------------------

    def describe(
        self, request: describe_msg.DescribeUserScramCredentialsRequest
    ) -> describe_msg.DescribeUserScramCredentialsResponse:
        """Answer a DescribeUserScramCredentials request (see the module's rules)."""
        known = self.credentials()
        if not request.users:
            names = sorted(known)
            duplicated: set[str] = set()
        else:
            names = list(dict.fromkeys(u.name for u in request.users))
            seen: set[str] = set()
            duplicated = set()
            for u in request.users:
                (duplicated if u.name in seen else seen).add(u.name)
        results = []
        for name in names:
            if name in duplicated:
                results.append(
                    DescribeResult(
                        user=name,
                        error_code=ErrorCode.DUPLICATE_RESOURCE,
                        error_message=f"user {name!r} is named more than once",
                        credential_infos=[],
                    )
                )
            elif name not in known:
                results.append(
                    DescribeResult(
                        user=name,
                        error_code=ErrorCode.RESOURCE_NOT_FOUND,
                        error_message=f"user {name!r} has no SCRAM credential",
                        credential_infos=[],
                    )
                )
            else:
                infos = sorted(
                    (SCRAM_MECHANISM_TYPES[m], c.iterations) for m, c in known[name].items()
                )
                results.append(
                    DescribeResult(
                        user=name,
                        error_code=ErrorCode.NONE,
                        error_message=None,
                        credential_infos=[
                            CredentialInfo(mechanism=m, iterations=i) for m, i in infos
                        ],
                    )
                )
        return describe_msg.DescribeUserScramCredentialsResponse(
            error_code=ErrorCode.NONE, error_message=None, results=results
        )

    # -- AlterUserScramCredentials ------------------------------------------------------------

    def alter(
        self, request: alter_msg.AlterUserScramCredentialsRequest
    ) -> alter_msg.AlterUserScramCredentialsResponse:
        """Answer an AlterUserScramCredentials request, making its valid changes
        durably first (see the module's rules)."""
        order, errors, deletions, upsertions = self.check_alter(request)
        hides = [k for k in deletions.values() if self._hides(k)]
        forgets = [k for k in deletions.values() if k not in hides]
        try:
            self.store.alter(upsertions.items(), hides, forgets)
        except ScramStoreError as exc:
            log.error("SCRAM credentials: cannot write the change: %s", exc)
            for name in (*deletions, *upsertions):
                errors[name] = (exc.code, f"the change could not be stored: {exc}")
        else:
            log_changes(deletions.values(), upsertions)
        return alter_response(order, errors)

    def check_alter(
        self, request: alter_msg.AlterUserScramCredentialsRequest
    ) -> tuple[
        dict[str, None],
        dict[str, tuple[ErrorCode, str]],
        dict[str, Key],
        dict[str, ScramCredential],
    ]:
        """Check a request's changes without making them: the users in the order
        it names them, the refused ones' errors, the valid deletions and upsertions
        (cluster mode writes these to ZooKeeper before answering)."""
        order: dict[str, None] = {}  # users in the order the request names them
        errors: dict[str, tuple[ErrorCode, str]] = {}
        deletions: dict[str, Key] = {}
        upsertions: dict[str, ScramCredential] = {}
        for d in request.deletions:
            order.setdefault(d.name)
            if d.name in errors:
                continue
            if deletions.pop(d.name, None) is not None:
                errors[d.name] = _duplicate(d.name)
                continue
            problem = self._check_deletion(d.name, d.mechanism)
            if problem is not None:
                errors[d.name] = problem
            else:
                deletions[d.name] = (d.name, SCRAM_MECHANISM_NAMES[d.mechanism])
        for u in request.upsertions:
            order.setdefault(u.name)
            if u.name in errors:
                continue
            if deletions.pop(u.name, None) is not None or upsertions.pop(u.name, None) is not None:
                errors[u.name] = _duplicate(u.name)
                continue
            problem = _check_upsertion(u)
            if problem is not None:
                errors[u.name] = problem
            else:
                mechanism = SCRAM_MECHANISM_NAMES[u.mechanism]
                upsertions[u.name] = ScramCredential.from_salted_password(
                    mechanism, u.salt, u.iterations, u.salted_password
                )
        return order, errors, deletions, upsertions

    def _hides(self, key: Key) -> bool:
        """Whether deleting ``key`` must hide a credential of the configuration."""
        user, mechanism = key
        return user in self._configured.get(mechanism, {})

    def _check_deletion(self, name: str, mechanism_type: int) -> tuple[ErrorCode, str] | None:
        problem = _check_name_and_mechanism(name, mechanism_type)
        if problem is not None:
            return problem
        mechanism = SCRAM_MECHANISM_NAMES[mechanism_type]
        if self.lookup(mechanism, name) is None:
            return (
                ErrorCode.RESOURCE_NOT_FOUND,
                f"user {name!r} has no {mechanism} credential to delete",
            )
        return None


def alter_response(
    order: Iterable[str], errors: Mapping[str, tuple[ErrorCode, str]]
) -> alter_msg.AlterUserScramCredentialsResponse:
    """The answer: one result per user, in order, NONE unless ``errors`` names it."""
    results = []
    for name in order:
        code, message = errors.get(name, (ErrorCode.NONE, None))
        results.append(AlterResult(user=name, error_code=code, error_message=message))
    return alter_msg.AlterUserScramCredentialsResponse(results=results)


def log_changes(deletions: Iterable[Key], upsertions: Mapping[str, ScramCredential]) -> None:
    """Log changes made (mechanisms and iteration counts only, never a key)."""
    for user, mechanism in deletions:
        log.info("SCRAM credentials: %s of user %r deleted", mechanism, user)
    for name, credential in upsertions.items():
        log.info(
            "SCRAM credentials: %s of user %r set (%d iterations)",
            credential.mechanism,
            name,
            credential.iterations,
        )


def _duplicate(name: str) -> tuple[ErrorCode, str]:
    return (
        ErrorCode.DUPLICATE_RESOURCE,
        f"user {name!r} is altered more than once in one request",
    )


def _check_name_and_mechanism(name: str, mechanism_type: int) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "the user name is empty"
    if mechanism_type not in SCRAM_MECHANISM_NAMES:
        known = ", ".join(f"{n} ({m})" for n, m in SCRAM_MECHANISM_NAMES.items())
        return (
            ErrorCode.UNSUPPORTED_SASL_MECHANISM,
            f"unknown SCRAM mechanism {mechanism_type}; known: {known}",
        )
    return None


def _check_upsertion(
    upsertion: alter_msg.AlterUserScramCredentialsRequest.ScramCredentialUpsertion,
) -> tuple[ErrorCode, str] | None:
    problem = _check_name_and_mechanism(upsertion.name, upsertion.mechanism)
    if problem is not None:
        return problem
    if not MIN_ITERATIONS <= upsertion.iterations <= MAX_ITERATIONS:
        return (
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
            f"{upsertion.iterations} iterations: SCRAM needs {MIN_ITERATIONS} to {MAX_ITERATIONS}",
        )
    if not upsertion.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "the salted password is empty"
    return None
