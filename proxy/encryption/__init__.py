"""Record encryption for the proxy (issue #83): the filter
:class:`RecordEncryption` (``use = "trafka.proxy.encryption:RecordEncryption"``),
the ciphertext frame (:mod:`.frame`), data keys in memory (:mod:`.keys`) and
the KMSs (:mod:`.kms`: the key file; :mod:`.aws`: AWS KMS). Needs the
``proxy-encryption`` extra (cryptography); AWS KMS the ``proxy-kms-aws`` one.
"""

from .filter import EncryptionStats, RecordEncryption
from .kms import KeyFileKms, Kms, KmsError, KmsRefused, KmsUnavailable, add_key_version

__all__ = [
    "EncryptionStats",
    "KeyFileKms",
    "Kms",
    "KmsError",
    "KmsRefused",
    "KmsUnavailable",
    "RecordEncryption",
    "add_key_version",
]
