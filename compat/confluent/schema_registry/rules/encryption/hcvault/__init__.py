"""HashiCorp Vault's transit engine as a KMS (``hcvault://`` key URLs)."""
