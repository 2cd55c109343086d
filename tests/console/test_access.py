"""The console's access rules without a server (:mod:`trafka.console.access`)
and where its settings come from (:mod:`trafka.console.server`): which
console is read-only, the password check, sessions and their end on a clock
the test moves, form tokens, the guessing brake and the login's redirect."""

from __future__ import annotations

from pathlib import Path

import pytest

from trafka.console.access import LoginThrottle, Sessions, decide_access, is_loopback, safe_next
from trafka.console.server import (
    ConsoleSettings,
    access_of,
    read_password_file,
    settings_from_environment,
)


@pytest.mark.parametrize(
    ("host", "kwargs", "mode", "read_only"),
    [
        # Nobody asked: writable only where only this host reaches it.
        ("127.0.0.1", {}, "open", False),
        ("::1", {}, "open", False),
        ("localhost", {}, "open", False),
        ("0.0.0.0", {}, "open", True),
        ("192.0.2.7", {}, "open", True),
        ("console.example", {}, "open", True),  # a name may resolve to anything
        # A password or a proxy's header: writable anywhere...
        ("0.0.0.0", {"password": "s3cret"}, "password", False),
        ("0.0.0.0", {"header": "X-Forwarded-User"}, "header", False),
        ("0.0.0.0", {"password": "p", "header": "X-Auth"}, "password+header", False),
        # ...unless asked for read-only.
        ("0.0.0.0", {"password": "s3cret", "read_only": True}, "password", True),
        ("127.0.0.1", {"read_only": True}, "open", True),
    ],
)
def test_who_may_change_the_cluster(
    host: str, kwargs: dict[str, object], mode: str, read_only: bool
) -> None:
    policy = decide_access(host, **kwargs)  # type: ignore[arg-type]
    assert (policy.mode, policy.read_only) == (mode, read_only)
    assert bool(policy.why_read_only) == read_only
    if read_only and mode == "open" and not kwargs:
        # The page and the log say why, and how to have it otherwise.
        assert host in policy.why_read_only and "TRAFKA_CONSOLE_PASSWORD" in policy.why_read_only


def test_bad_access_settings_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="password is empty"):
        decide_access("0.0.0.0", password="")
    with pytest.raises(ValueError, match="not a header name"):
        decide_access("0.0.0.0", header="X Forwarded: User")
    with pytest.raises(ValueError, match="trusted proxy"):
        decide_access("0.0.0.0", header="X-User", trusted_proxies=["proxy.example"])


def test_the_password_check_and_what_the_policy_keeps() -> None:
    policy = decide_access("0.0.0.0", password="correct horse")
    assert policy.check_password("correct horse")
    for wrong in ("correct hors", "correct horse ", "", "CORRECT HORSE"):
        assert not policy.check_password(wrong)
    assert "correct horse" not in repr(policy)  # only a digest, never shown
    assert not decide_access("127.0.0.1").check_password("")


def test_the_proxy_header_is_believed_from_the_proxy_only() -> None:
    policy = decide_access("0.0.0.0", header="X-Forwarded-User")
    assert policy.header == "x-forwarded-user"
    assert policy.header_user("127.0.0.1", " alice ") == "alice"
    assert policy.header_user("::1", "bob") == "bob"
    assert policy.header_user("192.0.2.9", "alice") is None  # anyone could send it
    assert policy.header_user("127.0.0.1", "  ") is None
    assert policy.header_user("127.0.0.1", None) is None
    assert policy.header_user(None, "alice") is None
    behind = decide_access("0.0.0.0", header="X-User", trusted_proxies=["10.1.0.0/16"])
    assert behind.header_user("10.1.2.3", "carol") == "carol"
    assert behind.header_user("127.0.0.1", "carol") is None
    assert decide_access("0.0.0.0").header_user("127.0.0.1", "alice") is None


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.2") and is_loopback("[::1]") and is_loopback("LOCALHOST")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("host")


def test_sessions_end_when_idle_when_old_and_on_logout() -> None:
    sessions = Sessions(idle_timeout=100, max_age=1000)
    sid = sessions.login("password login", now=0.0)
    assert sessions.user(sid, now=99.0) == "password login"
    assert sessions.user(sid, now=198.0) == "password login"  # each use counts
    assert sessions.user(sid, now=299.0) is None  # idle 101 s: ended
    assert sessions.user(sid, now=299.0) is None  # and forgotten

    old = sessions.login("password login", now=0.0)
    for t in range(50, 1000, 50):
        assert sessions.user(old, now=float(t)) == "password login"
    assert sessions.user(old, now=1001.0) is None  # used all along, but too old

    gone = sessions.login("password login", now=0.0)
    sessions.logout(gone)
    assert sessions.user(gone, now=0.0) is None
    assert sessions.user(None, now=0.0) is None and sessions.user("made-up", now=0.0) is None


def test_sessions_are_bounded_and_keep_the_recently_used() -> None:
    sessions = Sessions(max_sessions=3)
    a, b, c = (sessions.login("u", now=0.0) for _ in range(3))
    assert sessions.user(a, now=1.0) == "u"  # a is now the most recently used
    d = sessions.login("u", now=2.0)
    assert len(sessions) == 3
    assert sessions.user(b, now=3.0) is None  # the least recently used went
    assert all(sessions.user(s, now=3.0) == "u" for s in (a, c, d))
    assert len({a, b, c, d}) == 4 and len(a) >= 40  # 256 random bits each


def test_form_tokens_belong_to_one_session_and_one_person() -> None:
    sessions = Sessions(key=b"k" * 32)
    token = sessions.token("sid-1", "alice")
    assert sessions.token_ok("sid-1", "alice", token)
    assert not sessions.token_ok("sid-2", "alice", token)  # another browser's
    assert not sessions.token_ok("sid-1", "bob", token)  # another person's
    assert not sessions.token_ok("sid-1", "alice", token[:-1])
    assert not sessions.token_ok("sid-1", "alice", "")
    assert not sessions.token_ok(None, "alice", token)
    assert not sessions.token_ok("sid-1", "alice", "é" * 64)  # no crash on odd text
    # Another run of the console (another key) does not take this run's tokens.
    assert not Sessions().token_ok("sid-1", "alice", token)


def test_wrong_passwords_brake_logins() -> None:
    throttle = LoginThrottle(max_failures=3, window=60.0)
    for t in (0.0, 10.0, 20.0):
        assert throttle.wait(t) == 0.0
        throttle.failed(t)
    assert throttle.wait(30.0) == pytest.approx(30.0)  # until the first is 60 s old
    assert throttle.wait(59.9) == pytest.approx(0.1)
    assert throttle.wait(60.0) == 0.0  # one slot free again
    throttle.failed(60.0)
    assert throttle.wait(61.0) == pytest.approx(9.0)


@pytest.mark.parametrize(
    ("given", "goes_to"),
    [
        ("/topics?internal=1", "/topics?internal=1"),
        ("/groups/a%2Fb", "/groups/a%2Fb"),
        (None, "/"),
        ("", "/"),
        ("https://evil.example/", "/"),
        ("//evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("topics", "/"),
        ("/topics\r\nSet-Cookie: x=1", "/"),
    ],
)
def test_after_login_only_the_console_own_pages(given: str | None, goes_to: str) -> None:
    assert safe_next(given) == goes_to


def test_settings_from_the_environment(tmp_path: Path) -> None:
    assert settings_from_environment({}) == {}
    env = {
        "TRAFKA_CONSOLE_PASSWORD": "from-env",
        "TRAFKA_CONSOLE_READ_ONLY": "yes",
        "TRAFKA_CONSOLE_AUTH_HEADER": "X-Forwarded-User",
        "TRAFKA_CONSOLE_TRUSTED_PROXIES": "10.0.0.1, 10.2.0.0/16",
    }
    assert settings_from_environment(env) == {
        "password": "from-env",
        "read_only": True,
        "auth_header": "X-Forwarded-User",
        "trusted_proxies": ("10.0.0.1", "10.2.0.0/16"),
    }
    secret = tmp_path / "password"
    secret.write_text("from file\nignored second line\n")
    assert read_password_file(str(secret)) == "from file"
    assert settings_from_environment({"TRAFKA_CONSOLE_PASSWORD_FILE": str(secret)}) == {
        "password": "from file"
    }
    with pytest.raises(ValueError, match="not both"):
        settings_from_environment(
            {"TRAFKA_CONSOLE_PASSWORD": "a", "TRAFKA_CONSOLE_PASSWORD_FILE": str(secret)}
        )
    with pytest.raises(ValueError, match="must be 1 or 0"):
        settings_from_environment({"TRAFKA_CONSOLE_READ_ONLY": "maybe"})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        read_password_file(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="cannot read the password file"):
        read_password_file(str(tmp_path / "missing"))


def test_console_settings_never_show_the_password() -> None:
    settings = ConsoleSettings({"bootstrap.servers": "b:9092"}, "0.0.0.0:0", password="hunter2")
    assert "hunter2" not in repr(settings)
    assert access_of(settings).mode == "password" and not access_of(settings).read_only
