"""AWS KMS as record encryption's KMS (boto3; the ``proxy-kms-aws`` extra).

Rules:

* A KEK is an AWS KMS symmetric key, named by key id, ARN or alias
  (``alias/orders``) as the filter's topics table gives it. A new DEK is
  ``GenerateDataKey`` (``KeySpec=AES_256``): its plaintext is the DEK, its
  ``CiphertextBlob`` the wrapped DEK, and the ARN of the key that wrapped it
  the frame's KEK version. Unwrapping is ``Decrypt`` of the blob with that
  ARN as ``KeyId`` (so an alias moved since still unwraps what it wrapped).
* Rotation: point the alias at a new key (``UpdateAlias``), or let AWS rotate
  the key's material (the same ARN: its old material stays for Decrypt). Old
  records stay readable either way, without being encrypted again.
* ``NotFoundException``, ``InvalidCiphertextException``, ``DisabledException``,
  ``IncorrectKeyException``, ``KMSInvalidStateException`` and
  ``AccessDeniedException`` are refusals; every other error (the endpoint not
  answering, throttling) is :class:`~.kms.KmsUnavailable`.
* The client's credentials are boto3's usual chain (the environment,
  ``~/.aws``, an instance role) unless the settings give a key pair.
"""

from __future__ import annotations

from typing import Any

from .kms import DEK_SIZE, KmsRefused, KmsUnavailable

__all__ = ["AwsKms"]

_REFUSALS = frozenset(
    {
        "NotFoundException",
        "InvalidCiphertextException",
        "DisabledException",
        "IncorrectKeyException",
        "KMSInvalidStateException",
        "AccessDeniedException",
        "InvalidKeyUsageException",
    }
)


class AwsKms:
    """AWS KMS (see the module's rules).

    Args:
        region: the AWS region.
        endpoint_url: another endpoint than AWS's (a VPC endpoint, a local KMS).
        access_key_id, secret_access_key: credentials (default: boto3's chain).
        timeout: connect and read timeout of each call, in seconds.

    Raises:
        ValueError: boto3 is not installed (the ``proxy-kms-aws`` extra).
    """

    inline = False

    def __init__(
        self,
        region: str,
        endpoint_url: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        timeout: float = 5.0,
    ) -> None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise ValueError(
                "the AWS KMS needs boto3: pip install 'trafka[proxy-kms-aws]'"
            ) from None
        self._client: Any = boto3.client(
            "kms",
            region_name=region,
            endpoint_url=endpoint_url,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            config=Config(
                connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 2}
            ),
        )

    def _call(self, what: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self._client, what)(**kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            message = exc.response.get("Error", {}).get("Message", "")
            if code in _REFUSALS:
                raise KmsRefused(f"AWS KMS {what}: {code}: {message}") from None
            raise KmsUnavailable(f"AWS KMS {what}: {code}: {message}") from None
        except BotoCoreError as exc:
            raise KmsUnavailable(f"AWS KMS {what}: {exc}") from None

    def new_dek(self, kek_id: str) -> tuple[bytes, str, bytes]:
        got = self._call("generate_data_key", KeyId=kek_id, KeySpec="AES_256")
        dek = bytes(got["Plaintext"])
        if len(dek) != DEK_SIZE:
            raise KmsRefused(f"AWS KMS gave a {len(dek)}-byte data key")
        return dek, str(got["KeyId"]), bytes(got["CiphertextBlob"])

    def unwrap(self, kek_id: str, kek_version: str, wrapped: bytes) -> bytes:
        got = self._call("decrypt", CiphertextBlob=wrapped, KeyId=kek_version)
        dek = bytes(got["Plaintext"])
        if len(dek) != DEK_SIZE:
            raise KmsRefused(f"AWS KMS unwrapped a {len(dek)}-byte data key")
        return dek

    def check(self, kek_id: str) -> str | None:
        return None  # known only by asking AWS, which a settings check does not

    def key_key(self, kek_id: str, kek_version: str | None) -> tuple[str, bytes]:
        raise KmsRefused("AWS KMS holds its keys' bytes: record keys need kms = keyfile")

    def close(self) -> None:
        self._client.close()
