"""Delegation tokens (KIP-48): issued, renewed, expired and described through the
admin API, and logged in with over SASL/SCRAM; durable in the data directory.

CreateDelegationToken (key 38), RenewDelegationToken (39),
ExpireDelegationToken (40) and DescribeDelegationToken (41) are answered here,
sans-IO, as Kafka's controller (``DelegationTokenControlManager``) and brokers
answer them. A token lets a process that holds no password of its own (a Spark
executor, say) act as the token's owner: it logs in with SCRAM, the token id as
the user name, the token's HMAC in base64 as the password, and the client-first
extension ``tokenauth=true``.

Rules and invariants:

* Tokens exist only when ``delegation_token_secret_key`` is set; otherwise every
  token request is answered DELEGATION_TOKEN_AUTH_DISABLED and token logins
  fail. The HMAC is HMAC-SHA512 of the token id keyed with that secret (as
  Kafka's), never stored: the journal keeps the token's information only, so a
  changed secret invalidates every token issued under the old one (as Kafka).
* Who may ask (the handlers' ``request_allowed``, Kafka's
  ``allowTokenRequests``): not a connection that logged in with a token, not a
  PLAINTEXT listener, not an SSL connection without a client certificate;
  those get DELEGATION_TOKEN_REQUEST_NOT_ALLOWED.
* Create: the owner is the requester, or the v3 owner principal when it is
  given (the handler checks CREATE_TOKENS on that user first, else
  DELEGATION_TOKEN_AUTHORIZATION_FAILED). Owners and renewers must be of type
  ``User`` (INVALID_PRINCIPAL_TYPE; Kafka checks the renewers only, but every
  principal brokerlite authenticates is a ``User``). The maximum lifetime is
  ``delegation_token_max_lifetime_ms``, or the request's when positive and
  smaller; the first expiry is ``delegation_token_expiry_time_ms`` from now,
  capped at the maximum timestamp. Token ids are 22 random URL-safe base64
  characters (16 bytes, as Kafka's ``Uuid``), never starting with ``-``.
* Renew and expire find the token by its HMAC (DELEGATION_TOKEN_NOT_FOUND);
  a token past its expiry or maximum timestamp is DELEGATION_TOKEN_EXPIRED;
  only its owner and its renewers may renew or expire it
  (DELEGATION_TOKEN_OWNER_MISMATCH). Renew sets the expiry to now plus
  ``delegation_token_expiry_time_ms``, or the request's period when positive
  and smaller, capped at the maximum timestamp. Expire with a negative period
  removes the token at once and answers that moment as the expiry timestamp
  (as Kafka 3.9; Kafka 4 answers the period); otherwise it sets the expiry to
  now plus the period, capped.
* Describe: a null owner list means every owner, an empty one no token. A
  token is listed when it matches an owner asked for (as its owner, requester
  or a renewer) and the requester is its owner, requester or a renewer, or the
  handler's authorizer check allows DESCRIBE on the token or DESCRIBE_TOKENS on
  its owner.
* Expired tokens are removed by a sweep at most every
  ``delegation_token_expiry_check_interval_ms`` (Kafka's expiry check), run
  lazily by the token requests; until then renew and expire answer EXPIRED and
  describe still lists them. A login never succeeds with an expired token
  (Kafka's would, with a session lifetime of 0, and then close the connection
  at its next request).
* A token login's session lasts until the token's expiry at most (KIP-368);
  the connection's principal is the token's owner, marked as token-authenticated.
* Every change is one fsynced journal entry written before the answer; a
  change that cannot be written is UNKNOWN_SERVER_ERROR and nothing changes.
* Cluster mode (:meth:`DelegationTokens.use_cluster`): ZooKeeper holds the
  tokens (:mod:`.zk_tokens`, without HMACs), every broker keeps what it holds;
  a change is made here and written there by the cluster driver before the
  answer (:meth:`DelegationTokens.take_writes`), whence every broker applies it.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from trafka.codec.errors import ErrorCode
from trafka.codec.sasl import ScramCredential

from ..errors import BrokerError
from ..storage.journal import CrcJournal, JournalStore

__all__ = [
    "TOKENS_JOURNAL",
    "ClusterTokenStore",
    "DelegationTokenStore",
    "DelegationTokens",
    "TokenInfo",
    "TokenStoreError",
]

log = logging.getLogger("trafka.brokerlite")

TOKENS_JOURNAL = "trafka-delegation-tokens.journal"
_FORMAT = "delegation-tokens"
_FORMAT_VERSION = 1
USER_TYPE = "User"


class TokenStoreError(BrokerError):
    """The delegation-token journal cannot be read or written."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


@dataclasses.dataclass(frozen=True, slots=True)
class TokenInfo:
    """What the broker keeps of a token (never its HMAC).

    Principals are ``Type:name`` strings (``User:alice``).
    """

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_ms: int
    expiry_ms: int
    max_ms: int

    def expired(self, now_ms: int) -> bool:
        return self.max_ms < now_ms or self.expiry_ms < now_ms

    def names(self, principal: str) -> bool:
        """Whether ``principal`` is the owner, the requester or a renewer."""
        return principal in (self.owner, self.requester) or principal in self.renewers


class DelegationTokenStore(JournalStore):
    """The tokens, by id, in a journal.

    Entries (a :class:`~..storage.journal.CrcJournal` of format ``delegation-tokens``):
    ``{"kind": "token", "token_id", "owner", "requester", "renewers", "issue_ms",
    "expiry_ms", "max_ms"}`` (a new or changed token) and ``{"kind": "remove",
    "token_ids"}``.

    Raises:
        TokenStoreError: the journal cannot be read or written.
    """

    def __init__(
        self, path: Path, *, fsync: bool = True, compact_min_bytes: int = 64 * 1024
    ) -> None:
        journal = CrcJournal(
            Path(path),
            format_name=_FORMAT,
            version=_FORMAT_VERSION,
            fsync=fsync,
            error=TokenStoreError,
        )
        super().__init__(journal, compact_min_bytes=compact_min_bytes, name="token journal")
        self.tokens: dict[str, TokenInfo] = {}
        self._load()

    def put(self, token: TokenInfo) -> None:
        """Write ``token`` (new or changed), then keep it."""
        self._write(_token_json(token))

    def remove(self, token_ids: Iterable[str]) -> None:
        """Forget the tokens (one entry)."""
        self._write({"kind": "remove", "token_ids": list(token_ids)})

    def _apply(self, entry: dict[str, Any]) -> None:
        kind = entry.get("kind")
        try:
            if kind == "token":
                token = TokenInfo(
                    token_id=str(entry["token_id"]),
                    owner=str(entry["owner"]),
                    requester=str(entry["requester"]),
                    renewers=tuple(str(r) for r in entry["renewers"]),
                    issue_ms=int(entry["issue_ms"]),
                    expiry_ms=int(entry["expiry_ms"]),
                    max_ms=int(entry["max_ms"]),
                )
                self.tokens[token.token_id] = token
            elif kind == "remove":
                for token_id in entry["token_ids"]:
                    self.tokens.pop(str(token_id), None)
            else:
                raise TokenStoreError(
                    f"token journal {self.path}: unknown entry kind {kind!r} "
                    "(written by a newer brokerlite?)"
                )
        except (KeyError, TypeError, ValueError) as exc:
            raise TokenStoreError(f"token journal {self.path}: malformed entry: {exc}") from exc

    def _live_entries(self) -> list[dict[str, Any]]:
        return [_token_json(token) for token in self.tokens.values()]


#: A change to write to ZooKeeper in cluster mode: a token to put, or the id of one to remove.
TokenWrite = TokenInfo | str


class ClusterTokenStore:
    """Cluster mode's tokens: what ZooKeeper holds, in memory, with the changes
    made since the last :meth:`take_writes` waiting to be written there."""

    def __init__(self, tokens: Mapping[str, TokenInfo]) -> None:
        self.tokens: dict[str, TokenInfo] = dict(tokens)
        self.writes: list[TokenWrite] = []

    def put(self, token: TokenInfo) -> None:
        self.tokens[token.token_id] = token
        self.writes.append(token)

    def remove(self, token_ids: Iterable[str]) -> None:
        for token_id in token_ids:
            self.tokens.pop(token_id, None)
            self.writes.append(token_id)

    def close(self) -> None:
        pass


def _token_json(token: TokenInfo) -> dict[str, Any]:
    return {
        "kind": "token",
        "token_id": token.token_id,
        "owner": token.owner,
        "requester": token.requester,
        "renewers": list(token.renewers),
        "issue_ms": token.issue_ms,
        "expiry_ms": token.expiry_ms,
        "max_ms": token.max_ms,
    }


class DelegationTokens:
    """The broker's tokens: the rules of the module docstring.

    Args:
        store: where tokens are kept.
        secret_key: ``delegation_token_secret_key``; None disables tokens.
        max_lifetime_ms, expiry_time_ms, expiry_check_interval_ms: the
            ``delegation_token_*`` settings.
        now_ms: the time the sweep interval counts from.
    """

    def __init__(
        self,
        store: DelegationTokenStore,
        *,
        secret_key: str | None,
        max_lifetime_ms: int,
        expiry_time_ms: int,
        expiry_check_interval_ms: int,
        now_ms: int,
    ) -> None:
        self.store: DelegationTokenStore | ClusterTokenStore = store
        self._journal = store
        self._secret = None if secret_key is None else secret_key.encode()
        self._max_lifetime_ms = max_lifetime_ms
        self._expiry_time_ms = expiry_time_ms
        self._check_interval_ms = expiry_check_interval_ms
        self._last_sweep_ms = now_ms
        self._by_hmac: dict[bytes, str] = {}
        # SCRAM credentials made from a token's HMAC, by (token id, mechanism):
        # PBKDF2 runs once per token and mechanism, not per login.
        self._credentials: dict[tuple[str, str], ScramCredential] = {}
        if self._secret is not None:
            self._by_hmac = {self.hmac(t): t for t in store.tokens}

    @classmethod
    def open(cls, path: Path, **settings: Any) -> DelegationTokens:
        """Open the journal at ``path``.

        Raises:
            TokenStoreError: the journal cannot be read.
        """
        return cls(DelegationTokenStore(path), **settings)

    def close(self) -> None:
        self._journal.close()

    # -- cluster mode -------------------------------------------------------------------

    def use_cluster(self, tokens: Mapping[str, TokenInfo]) -> None:
        """Cluster mode: from now on the tokens are ``tokens`` (what ZooKeeper
        holds; the journal is not used), and changes wait in :meth:`take_writes`
        for the cluster driver to write them there."""
        if isinstance(self.store, ClusterTokenStore):
            self.store.tokens = dict(tokens)
        else:
            self.store = ClusterTokenStore(tokens)
        self._credentials = {k: c for k, c in self._credentials.items() if k[0] in tokens}
        if self._secret is not None:
            self._by_hmac = {self.hmac(t): t for t in tokens}

    def take_writes(self) -> list[TokenWrite]:
        """Cluster mode: the changes made since the last call, to write to
        ZooKeeper (none outside cluster mode)."""
        store = self.store
        if not isinstance(store, ClusterTokenStore):
            return []
        writes, store.writes = store.writes, []
        return writes

    @property
    def enabled(self) -> bool:
        return self._secret is not None

    @property
    def tokens(self) -> dict[str, TokenInfo]:
        """Every token kept, by id (a read-only view by convention)."""
        return self.store.tokens

    def hmac(self, token_id: str) -> bytes:
        """The token's HMAC: HMAC-SHA512 of its id keyed with the secret."""
        assert self._secret is not None
        return hmac.new(self._secret, token_id.encode(), hashlib.sha512).digest()

    # -- the API ------------------------------------------------------------------------

    def create(
        self,
        owner: str,
        requester: str,
        renewers: Iterable[str],
        max_lifetime_ms: int,
        now_ms: int,
    ) -> tuple[ErrorCode, TokenInfo | None]:
        """A new token of ``owner`` asked for by ``requester``.

        Returns:
            NONE and the token, or the error (DELEGATION_TOKEN_AUTH_DISABLED,
            INVALID_PRINCIPAL_TYPE, UNKNOWN_SERVER_ERROR) and None.
        """
        if not self.enabled:
            return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, None
        renewers = tuple(renewers)
        if any(_type(p) != USER_TYPE for p in (owner, *renewers)):
            return ErrorCode.INVALID_PRINCIPAL_TYPE, None
        self._sweep(now_ms)
        lifetime = self._max_lifetime_ms
        if max_lifetime_ms > 0:
            lifetime = min(lifetime, max_lifetime_ms)
        max_ms = now_ms + lifetime
        token = TokenInfo(
            token_id=self._new_id(),
            owner=owner,
            requester=requester,
            renewers=renewers,
            issue_ms=now_ms,
            expiry_ms=min(max_ms, now_ms + self._expiry_time_ms),
            max_ms=max_ms,
        )
        if not self._put(token):
            return ErrorCode.UNKNOWN_SERVER_ERROR, None
        self._by_hmac[self.hmac(token.token_id)] = token.token_id
        return ErrorCode.NONE, token

    def renew(
        self, token_hmac: bytes, principal: str, period_ms: int, now_ms: int
    ) -> tuple[ErrorCode, int]:
        """Renew the token whose HMAC is ``token_hmac``: (error, new expiry)."""
        code, token = self._changeable(token_hmac, principal, now_ms)
        if token is None:
            return code, -1
        lifetime = self._expiry_time_ms
        if period_ms > 0:
            lifetime = min(lifetime, period_ms)
        expiry = min(token.max_ms, now_ms + lifetime)
        if not self._put(dataclasses.replace(token, expiry_ms=expiry)):
            return ErrorCode.UNKNOWN_SERVER_ERROR, -1
        return ErrorCode.NONE, expiry

    def expire(
        self, token_hmac: bytes, principal: str, period_ms: int, now_ms: int
    ) -> tuple[ErrorCode, int]:
        """Expire the token whose HMAC is ``token_hmac`` (a negative period: now,
        removing it): (error, new expiry; ``now_ms`` for a token removed)."""
        code, token = self._changeable(token_hmac, principal, now_ms)
        if token is None:
            return code, -1
        if period_ms < 0:
            if not self._remove([token.token_id]):
                return ErrorCode.UNKNOWN_SERVER_ERROR, -1
            # Answered with the moment it ended, as Kafka 3.9 answers it (Kafka 4's
            # KRaft controller answers the period itself: see docs/brokerlite.md).
            return ErrorCode.NONE, now_ms
        expiry = min(token.max_ms, now_ms + period_ms)
        if not self._put(dataclasses.replace(token, expiry_ms=expiry)):
            return ErrorCode.UNKNOWN_SERVER_ERROR, -1
        return ErrorCode.NONE, expiry

    def describe(
        self,
        owners: list[str] | None,
        requester: str,
        may_describe: Callable[[TokenInfo], bool],
        now_ms: int,
    ) -> list[TokenInfo]:
        """The tokens ``requester`` may see among those of ``owners`` (None: all),
        by issue time; ``may_describe(token)`` is the ACL check for tokens the
        requester is not named in."""
        self._sweep(now_ms)
        if owners is not None and not owners:
            return []
        found = []
        for token in self.tokens.values():
            if owners is not None and not any(token.names(o) for o in owners):
                continue
            if token.names(requester) or may_describe(token):
                found.append(token)
        found.sort(key=lambda t: (t.issue_ms, t.token_id))
        return found

    # -- logins -------------------------------------------------------------------------

    def scram_credential(
        self, mechanism: str, token_id: str, now_ms: int
    ) -> ScramCredential | None:
        """The SCRAM credential of a live token for ``mechanism``; None when there
        is no such token, it has expired, or tokens are disabled."""
        token = self.tokens.get(token_id)
        if not self.enabled or token is None or token.expired(now_ms):
            return None
        key = (token_id, mechanism)
        credential = self._credentials.get(key)
        if credential is None:
            password = base64.b64encode(self.hmac(token_id)).decode()
            credential = ScramCredential.from_password(mechanism, password)
            self._credentials[key] = credential
        return credential

    def login(self, token_id: str, now_ms: int) -> TokenInfo | None:
        """The live token a SCRAM token login completed with; None when it has
        gone or expired meanwhile."""
        token = self.tokens.get(token_id)
        if not self.enabled or token is None or token.expired(now_ms):
            return None
        return token

    # -- internals ----------------------------------------------------------------------

    def _changeable(
        self, token_hmac: bytes, principal: str, now_ms: int
    ) -> tuple[ErrorCode, TokenInfo | None]:
        if not self.enabled:
            return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, None
        self._sweep(now_ms)
        token_id = self._by_hmac.get(bytes(token_hmac))
        token = None if token_id is None else self.tokens.get(token_id)
        if token is None:
            return ErrorCode.DELEGATION_TOKEN_NOT_FOUND, None
        if token.expired(now_ms):
            return ErrorCode.DELEGATION_TOKEN_EXPIRED, None
        if principal != token.owner and principal not in token.renewers:
            return ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH, None
        return ErrorCode.NONE, token

    def _sweep(self, now_ms: int) -> None:
        """Remove expired tokens, at most once per check interval."""
        if now_ms - self._last_sweep_ms < self._check_interval_ms:
            return
        self._last_sweep_ms = now_ms
        expired = [t.token_id for t in self.tokens.values() if t.expired(now_ms)]
        if expired and self._remove(expired):
            log.info("removed %d expired delegation token(s)", len(expired))

    def _put(self, token: TokenInfo) -> bool:
        try:
            self.store.put(token)
        except TokenStoreError:
            log.exception("cannot write delegation token %s", token.token_id)
            return False
        return True

    def _remove(self, token_ids: list[str]) -> bool:
        try:
            self.store.remove(token_ids)
        except TokenStoreError:
            log.exception("cannot remove delegation tokens")
            return False
        for token_id in token_ids:
            for key in [k for k in self._credentials if k[0] == token_id]:
                del self._credentials[key]
        if self.enabled:
            gone = set(token_ids)
            self._by_hmac = {h: t for h, t in self._by_hmac.items() if t not in gone}
        return True

    def _new_id(self) -> str:
        while True:
            token_id = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
            if not token_id.startswith("-") and token_id not in self.tokens:
                return token_id


def _type(principal: str) -> str:
    return principal.partition(":")[0]
