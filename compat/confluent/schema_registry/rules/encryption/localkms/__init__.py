"""A local KMS (``local-kms://`` key URLs): a KEK derived from a secret, for tests and development."""
