"""Who may use the console and what they may do: the rules, without I/O.

A console that can produce, delete topics and change ACLs must not be open to
whoever reaches its port. :func:`decide_access` turns the settings into an
:class:`AccessPolicy`; :class:`Sessions` keeps the logged-in sessions and
derives each one's form token; :class:`LoginThrottle` slows password guessing.
Time is an argument (``now``, seconds of a monotonic clock) everywhere, so the
tests move it by hand.

Rules:

* **Who.** A person is known in one of two ways, each opt-in:

  - ``password``: they log in at ``/login`` with the console's password (from an
    environment variable or a file, never the command line). The password is
    kept only as its SHA-256 digest and compared in constant time
    (:func:`hmac.compare_digest` over digests of equal length, so neither the
    content nor the length leaks through timing). A login opens a session with
    a fresh random id (an id set before the login is never promoted).
  - ``header``: a reverse proxy in front authenticates people and names them in
    a request header whose name is configured. The header is believed only on
    connections from the proxy's addresses (``trusted_proxies``, loopback by
    default): anyone else could send it too.

  With both, the header wins where it is believed and the password serves the
  rest. With neither, nobody is asked (``open``).
* **Safe default.** An open console on a non-loopback address is read-only,
  and says why on every page: anyone who reaches the port could otherwise
  change the cluster. On loopback an open console may change the cluster (only
  this host reaches it; the ``Host``, ``Origin`` and token checks keep other
  sites' pages out). ``read_only`` makes any console read-only.
* **Read-only** is refused by the server, not only hidden: every request that
  would change the cluster is answered 403 before its form is read.
* **Forms.** Every request that changes state is a POST carrying the form token
  of its session: an HMAC of the session id and the person's name under a key
  of this console's run. The session id travels in a cookie that scripts cannot
  read (``HttpOnly``) and that other sites' forms do not carry (``SameSite``);
  the POST's ``Origin`` (or ``Referer``) must be the console's own host. A page
  served to an open console sets an anonymous session id the same way, so its
  tokens are per browser too.
* **Sessions** end when idle for ``idle_timeout`` or older than ``max_age``,
  on logout, and when the console stops (they live in memory). At most
  ``max_sessions`` are kept; the least recently used goes first.
* **Guessing.** After ``max_failures`` wrong passwords within ``window``
  seconds, every login is refused until the oldest of them is ``window`` old.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import ipaddress
import secrets
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Literal

__all__ = [
    "DEFAULT_TRUSTED_PROXIES",
    "AccessPolicy",
    "LoginThrottle",
    "Sessions",
    "decide_access",
    "is_loopback",
    "safe_next",
]

Mode = Literal["open", "password", "header", "password+header"]

#: Where a proxy's identity header is believed from unless told otherwise.
DEFAULT_TRUSTED_PROXIES: tuple[str, ...] = ("127.0.0.0/8", "::1/128")
_HEADER_NAME = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


@dataclasses.dataclass(frozen=True)
class AccessPolicy:
    """What :func:`decide_access` decided.

    Attributes:
        mode: how people are known (``open``: they are not).
        read_only: no change of the cluster is offered or accepted.
        why_read_only: the reason, shown on every page (empty when writable).
        header: the proxy's identity header, lower case (None: not trusted).
        trusted_proxies: the networks that header is believed from.
    """

    mode: Mode
    read_only: bool
    why_read_only: str = ""
    header: str | None = None
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    password_digest: bytes | None = dataclasses.field(default=None, repr=False)

    @property
    def password(self) -> bool:
        return self.password_digest is not None

    def check_password(self, given: str) -> bool:
        """Whether ``given`` is the console's password, compared in constant time."""
        if self.password_digest is None:
            return False
        return hmac.compare_digest(_digest(given), self.password_digest)

    def header_user(self, peer: str | None, value: str | None) -> str | None:
        """The person a proxy named in the identity header, when the request came
        from a trusted proxy and the header is there and not blank."""
        if self.header is None or value is None or not value.strip() or peer is None:
            return None
        try:
            ip = ipaddress.ip_address(peer)
        except ValueError:
            return None
        if not any(ip in net for net in self.trusted_proxies):
            return None
        return value.strip()


def _digest(password: str) -> bytes:
    return hashlib.sha256(password.encode("utf-8")).digest()


def is_loopback(host: str) -> bool:
    """Whether a listen host is a loopback address (``localhost`` counts)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def decide_access(
    listen_host: str,
    *,
    password: str | None = None,
    header: str | None = None,
    trusted_proxies: Iterable[str] = DEFAULT_TRUSTED_PROXIES,
    read_only: bool = False,
) -> AccessPolicy:
    """The policy for a console listening on ``listen_host``.

    Raises:
        ValueError: an empty password, a header name that is not a header's, or a
            trusted proxy that is not an address or network.
    """
    if password is not None and not password:
        raise ValueError("the console's password is empty")
    name = None
    if header is not None:
        name = header.strip().lower()
        if not name or not set(name) <= _HEADER_NAME:
            raise ValueError(f"{header!r} is not a header name (letters, digits and '-')")
    try:
        nets = tuple(ipaddress.ip_network(p.strip(), strict=False) for p in trusted_proxies)
    except ValueError as exc:
        raise ValueError(f"trusted proxy: {exc}") from None
    digest = None if password is None else _digest(password)
    mode: Mode
    if digest is not None and name is not None:
        mode = "password+header"
    elif digest is not None:
        mode = "password"
    elif name is not None:
        mode = "header"
    else:
        mode = "open"
    why = ""
    if read_only:
        why = "this console was started read-only"
    elif mode == "open" and not is_loopback(listen_host):
        why = (
            f"this console listens on {listen_host} with neither a password nor a trusted "
            "proxy header, so it only shows the cluster; set TRAFKA_CONSOLE_PASSWORD "
            "(or --password-file, or --auth-header behind a proxy) to make changes"
        )
    return AccessPolicy(
        mode=mode,
        read_only=bool(why),
        why_read_only=why,
        header=name,
        trusted_proxies=nets,
        password_digest=digest,
    )


@dataclasses.dataclass
class _Session:
    user: str
    created: float
    seen: float


class Sessions:
    """Logged-in sessions, and the form token of any session id.

    Args:
        idle_timeout: seconds without a request after which a session ends.
        max_age: seconds after its login at which a session ends anyway.
        max_sessions: the most sessions kept; the least recently used goes first.
        key: the HMAC key of the form tokens (random unless given).
    """

    def __init__(
        self,
        *,
        idle_timeout: float = 8 * 3600,
        max_age: float = 24 * 3600,
        max_sessions: int = 10_000,
        key: bytes | None = None,
    ) -> None:
        self.idle_timeout = idle_timeout
        self.max_age = max_age
        self.max_sessions = max_sessions
        self._key = key if key is not None else secrets.token_bytes(32)
        self._live: OrderedDict[str, _Session] = OrderedDict()

    @staticmethod
    def new_id() -> str:
        """A fresh random session id (256 bits)."""
        return secrets.token_urlsafe(32)

    def login(self, user: str, now: float) -> str:
        """Open a session for ``user``; returns its new id."""
        sid = self.new_id()
        self._live[sid] = _Session(user, now, now)
        while len(self._live) > self.max_sessions:
            self._live.popitem(last=False)
        return sid

    def user(self, sid: str | None, now: float) -> str | None:
        """Who session ``sid`` belongs to (it counts as activity), or None when it
        is unknown or has ended."""
        if sid is None:
            return None
        s = self._live.get(sid)
        if s is None:
            return None
        if now - s.seen > self.idle_timeout or now - s.created > self.max_age:
            del self._live[sid]
            return None
        s.seen = now
        self._live.move_to_end(sid)
        return s.user

    def logout(self, sid: str | None) -> None:
        if sid is not None:
            self._live.pop(sid, None)

    def __len__(self) -> int:
        return len(self._live)

    def token(self, sid: str, user: str) -> str:
        """The form token of session ``sid`` for ``user``."""
        mac = hmac.new(self._key, f"{sid}\n{user}".encode(), hashlib.sha256)
        return mac.hexdigest()

    def token_ok(self, sid: str | None, user: str, given: str) -> bool:
        """Whether ``given`` is the form token of ``sid`` for ``user`` (constant time)."""
        if not sid or not given:
            return False
        return hmac.compare_digest(self.token(sid, user).encode(), given.encode("utf-8", "replace"))


class LoginThrottle:
    """At most ``max_failures`` wrong passwords per ``window`` seconds, console-wide."""

    def __init__(self, max_failures: int = 10, window: float = 60.0) -> None:
        self.max_failures = max_failures
        self.window = window
        self._failures: deque[float] = deque()

    def wait(self, now: float) -> float:
        """Seconds before a login may be tried (0: now)."""
        while self._failures and now - self._failures[0] >= self.window:
            self._failures.popleft()
        if len(self._failures) < self.max_failures:
            return 0.0
        return self._failures[0] + self.window - now

    def failed(self, now: float) -> None:
        self._failures.append(now)


def safe_next(target: str | None) -> str:
    """Where to go after a login: a path of this console, never another site
    (``//host``, ``/\\host`` and absolute URLs are refused as ``/``)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return "/"
    if any(ord(c) < 0x20 for c in target):
        return "/"
    return target
