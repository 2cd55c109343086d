"""Users' SCRAM credentials (DescribeUserScramCredentials and
AlterUserScramCredentials, KIP-554). Passwords are salted and hashed here,
before a request is built; only the salted password is sent. No I/O;
:class:`~trafka.sdk.admin.Admin` sends the requests.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterable
from typing import Any

from trafka.codec import KafkaError
from trafka.codec.messages import k50_describe_user_scram_credentials as dusc
from trafka.codec.messages import k51_alter_user_scram_credentials as ausc
from trafka.codec.sasl import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISM_NAMES,
    SCRAM_MECHANISM_TYPES,
    salted_password,
)

from .._validate import check_int, check_str, describe
from ..calls import TRANSIENT, check
from ..errors import ArgumentTypeError, ArgumentValueError
from ._common import Result, answered, first_failure, partition_outcome

__all__ = [
    "ScramAlterations",
    "ScramCredentialInfo",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
    "alter_user_scram_credentials_request",
    "describe_user_scram_credentials_request",
    "read_alter_user_scram_credentials",
    "read_describe_user_scram_credentials",
    "scram_alterations",
    "scram_type",
]


@dataclasses.dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    """One SCRAM credential of a user: its mechanism (``SCRAM-SHA-256`` or
    ``SCRAM-SHA-512``) and iteration count (DescribeUserScramCredentials)."""

    mechanism: str
    iterations: int


@dataclasses.dataclass(frozen=True, slots=True)
class UserScramCredentialsDescription:
    """A user's SCRAM credentials, by mechanism number (never their secrets)."""

    user: str
    credential_infos: tuple[ScramCredentialInfo, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class UserScramCredentialUpsertion:
    """Set ``user``'s password for one SCRAM mechanism (KIP-554).

    The client salts and hashes the password itself (a random salt unless
    ``salt`` is given, ``iterations`` rounds of PBKDF2); the broker receives
    only the salted password. Neither the password nor the salt is in ``repr``.

    Raises:
        TypeError: a field of the wrong type.
        ValueError: an unknown mechanism, iterations below 1 or far past
            Kafka's maximum (16384, which the broker enforces).
    """

    user: str
    password: str = dataclasses.field(repr=False)
    mechanism: str = "SCRAM-SHA-256"
    iterations: int = MIN_ITERATIONS
    salt: bytes | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        # The broker judges the name and the iteration count (4096-16384); a
        # count far past that is refused here, where the hashing would spend
        # the caller's time on a credential the broker refuses anyway.
        check_str("user", self.user, empty=True)
        if not isinstance(self.password, str):  # never its repr in a message
            raise ArgumentTypeError(f"password must be a str, got {type(self.password).__name__}")
        check_str("password", self.password, empty=True)
        scram_type(self.mechanism)
        check_int("iterations", self.iterations, minimum=1, maximum=_ITERATIONS_BOUND)
        if self.salt is not None and not isinstance(self.salt, bytes):
            raise ArgumentTypeError(f"salt must be bytes or None, got {type(self.salt).__name__}")


@dataclasses.dataclass(frozen=True, slots=True)
class UserScramCredentialDeletion:
    """Delete ``user``'s credential for one SCRAM mechanism (KIP-554)."""

    user: str
    mechanism: str = "SCRAM-SHA-256"

    def __post_init__(self) -> None:
        check_str("user", self.user, empty=True)
        scram_type(self.mechanism)


#: The most iterations an upsertion may ask for: ten times Kafka's maximum (as
#: the SCRAM client bounds a server's), past which hashing would take seconds.
_ITERATIONS_BOUND = 10 * MAX_ITERATIONS


def scram_type(mechanism: str) -> int:
    """The wire number of a SCRAM mechanism's name (any case).

    Raises:
        TypeError: a mechanism that is not a str.
        ValueError: an unknown mechanism.
    """
    if not isinstance(mechanism, str):
        raise ArgumentTypeError(f"mechanism must be a str, got {describe(mechanism)}")
    try:
        return SCRAM_MECHANISM_TYPES[mechanism.upper()]
    except KeyError:
        raise ArgumentValueError(
            f"mechanism: unknown SCRAM mechanism {mechanism!r}; "
            f"known: {', '.join(SCRAM_MECHANISM_TYPES)}"
        ) from None


def describe_user_scram_credentials_request(names: list[str] | None) -> Any:
    """DescribeUserScramCredentials of ``names`` (None: every user that has one;
    an empty list asks for every user too, so callers answer it themselves)."""
    req = dusc.DescribeUserScramCredentialsRequest
    return req(users=None if names is None else [req.UserName(name=n) for n in names])


def read_describe_user_scram_credentials(
    resp: Any, names: list[str] | None
) -> dict[str, UserScramCredentialsDescription]:
    """The users' credentials: in the order of ``names``, or sorted by user.

    Raises:
        Again: a transient error for the request.
        KafkaError: the request's other error; else the first user's that failed
            (RESOURCE_NOT_FOUND without credentials), in the order of ``names``
            (sorted with None), or one of ``names`` not answered.
    """
    check(resp.error_code, "describing SCRAM credentials", resp.error_message, again=TRANSIENT)
    out: dict[str, UserScramCredentialsDescription] = {}
    failed: dict[str, KafkaError] = {}
    for r in resp.results:
        error = partition_outcome(
            r.error_code, r.error_message, f"describing the SCRAM credentials of user {r.user!r}"
        )
        if error is not None:
            failed[r.user] = error
            continue
        infos = tuple(
            ScramCredentialInfo(
                SCRAM_MECHANISM_NAMES.get(c.mechanism, f"UNKNOWN-{c.mechanism}"), c.iterations
            )
            for c in r.credential_infos
        )
        out[r.user] = UserScramCredentialsDescription(r.user, infos)
    if names is None:
        first_failure(sorted(failed), failed)
        return dict(sorted(out.items()))
    first_failure(names, failed)
    return answered(names, out, "describing the SCRAM credentials of user")


@dataclasses.dataclass(frozen=True, slots=True)
class ScramAlterations:
    """Alterations ready to send: the deletions and upsertions (passwords already
    salted) of AlterUserScramCredentials, and the users in the order given."""

    deletions: tuple[Any, ...]
    upsertions: tuple[Any, ...]
    users: tuple[str, ...]


def scram_alterations(
    alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
) -> ScramAlterations:
    """The alterations as the request carries them; each upsertion's password
    salted (with a random 32-byte salt unless it has one) and hashed.

    Raises:
        ValueError: an unknown mechanism name, or iterations below 1.
    """
    req = ausc.AlterUserScramCredentialsRequest
    deletions: list[Any] = []
    upsertions: list[Any] = []
    names: dict[str, None] = {}  # in the order given
    for alt in alterations:
        mechanism = scram_type(alt.mechanism)
        names.setdefault(alt.user)
        if isinstance(alt, UserScramCredentialDeletion):
            deletions.append(req.ScramCredentialDeletion(name=alt.user, mechanism=mechanism))
            continue
        if alt.iterations < 1:
            raise ArgumentValueError(f"SCRAM iterations must be positive, not {alt.iterations}")
        salt = secrets.token_bytes(32) if alt.salt is None else alt.salt
        upsertions.append(
            req.ScramCredentialUpsertion(
                name=alt.user,
                mechanism=mechanism,
                iterations=alt.iterations,
                salt=salt,
                salted_password=salted_password(
                    alt.mechanism.upper(), alt.password, salt, alt.iterations
                ),
            )
        )
    return ScramAlterations(tuple(deletions), tuple(upsertions), tuple(names))


def alter_user_scram_credentials_request(plan: ScramAlterations, users: set[str]) -> Any:
    """AlterUserScramCredentials with the alterations of ``users`` (those still open)."""
    return ausc.AlterUserScramCredentialsRequest(
        deletions=[d for d in plan.deletions if d.name in users],
        upsertions=[u for u in plan.upsertions if u.name in users],
    )


def read_alter_user_scram_credentials(resp: Any) -> list[Result]:
    """``(user, error code, message)`` per user of an AlterUserScramCredentials answer."""
    return [(r.user, r.error_code, r.error_message) for r in resp.results]
