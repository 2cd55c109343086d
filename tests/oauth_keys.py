"""Test helpers: signing keys, their JWK set and signed tokens (RFC 7515/7517/7518).

Shared by the codec's and brokerlite's OAUTHBEARER tests (``tests/conftest.py``
puts this folder on the path).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int(value: int, size: int | None = None) -> str:
    length = size or (value.bit_length() + 7) // 8
    return b64(value.to_bytes(length, "big"))


class SigningKey:
    """A private key with its kid, its JWK and a signer for one algorithm."""

    def __init__(self, kid: str, alg: str = "RS256") -> None:
        self.kid, self.alg = kid, alg
        if alg.startswith("ES"):
            curve = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}[alg]
            self.private: Any = ec.generate_private_key(curve)
        else:
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    @property
    def jwk(self) -> dict[str, Any]:
        numbers = self.private.public_key().public_numbers()
        if self.alg.startswith("ES"):
            crv = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}[self.alg]
            size = {"P-256": 32, "P-384": 48, "P-521": 66}[crv]
            return {
                "kty": "EC",
                "kid": self.kid,
                "use": "sig",
                "crv": crv,
                "x": _int(numbers.x, size),
                "y": _int(numbers.y, size),
            }
        return {
            "kty": "RSA",
            "kid": self.kid,
            "use": "sig",
            "n": _int(numbers.n),
            "e": _int(numbers.e),
        }

    def sign(self, claims: dict[str, Any], *, kid: str | None = "", alg: str | None = None) -> str:
        alg = alg or self.alg
        header: dict[str, Any] = {"alg": alg, "typ": "JWT"}
        if kid is not None:
            header["kid"] = kid or self.kid
        signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
        digest = {"256": hashes.SHA256(), "384": hashes.SHA384(), "512": hashes.SHA512()}[alg[2:]]
        data = signing_input.encode()
        if alg.startswith("RS"):
            signature = self.private.sign(data, padding.PKCS1v15(), digest)
        elif alg.startswith("PS"):
            signature = self.private.sign(
                data, padding.PSS(padding.MGF1(digest), digest.digest_size), digest
            )
        else:
            r, s = utils.decode_dss_signature(self.private.sign(data, ec.ECDSA(digest)))
            size = (self.private.curve.key_size + 7) // 8
            signature = r.to_bytes(size, "big") + s.to_bytes(size, "big")
        return f"{signing_input}.{b64(signature)}"


def jwks(*keys: SigningKey) -> dict[str, Any]:
    return {"keys": [k.jwk for k in keys]}
