"""Who may connect and what they may do: SASL, SCRAM credentials, delegation
tokens, OAUTHBEARER's keys and the ACL authorizer.

:mod:`.sasl` (each connection's authentication state), :mod:`.scram` (SCRAM
credentials, KIP-554), :mod:`.delegation_tokens` (KIP-48), :mod:`.jwks`
(OAUTHBEARER's signing keys) and :mod:`.authorizer` (Kafka's ACL rules).

Rules: sans-IO apart from their journal files (and :mod:`.jwks`' fetch of a key
set); no import of the broker core, the handlers or a driver.
"""
