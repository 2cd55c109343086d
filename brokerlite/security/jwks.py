"""The identity provider's public keys for OAUTHBEARER (KIP-768's JWKS endpoint).

``sasl_oauthbearer_jwks_endpoint_url`` names a JWK set document: an ``https://``
(or ``http://``) URL, or a ``file:`` URL for keys kept on disk. brokerlite reads
it when it starts and again every ``sasl_oauthbearer_jwks_endpoint_refresh_ms``
(the driver does that in a worker thread, :func:`fetch_jwks` being blocking). A
failed read keeps the keys already known (none at the start: every token is
refused until a read succeeds), is logged, and is retried sooner.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from trafka.codec.oauthbearer import JwkSet

__all__ = ["JwksError", "check_jwks_url", "fetch_jwks"]

# A JWK set is a few kilobytes; refuse to read more than this.
_MAX_BYTES = 1 << 20


class JwksError(Exception):
    """The key set could not be read or parsed."""


def check_jwks_url(url: str) -> str:
    """``url`` if it is an http(s) or file URL.

    Raises:
        ValueError: another kind of URL.
    """
    if urllib.parse.urlsplit(url).scheme not in ("http", "https", "file"):
        raise ValueError(f"expected an https, http or file URL, got {url!r}")
    return url


def fetch_jwks(url: str, *, timeout: float = 10.0) -> JwkSet:
    """Read and parse the JWK set at ``url`` (blocking).

    Raises:
        JwksError: it cannot be read (network, HTTP status, file) or is not a
            usable JWK set.
    """
    # urllib.request (with http.client and email) loads here: a broker without
    # a JWKS endpoint, most of them, never reads one.
    import urllib.error
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    try:
        if parts.scheme == "file":
            path = Path(urllib.request.url2pathname(parts.path))
            with path.open("rb") as f:
                data = f.read(_MAX_BYTES + 1)
        else:
            request = urllib.request.Request(url, headers={"Accept": "application/json"})
            with urllib.request.urlopen(request, timeout=timeout) as response:
                data = response.read(_MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise JwksError(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise JwksError(f"{url}: {getattr(exc, 'reason', exc)}") from None
    if len(data) > _MAX_BYTES:
        raise JwksError(f"{url}: more than {_MAX_BYTES} bytes; not a JWK set")
    try:
        return JwkSet.from_json(data)
    except ValueError as exc:
        raise JwksError(f"{url}: {exc}") from None
