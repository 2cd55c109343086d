"""Kafka's ACL enumerations (KIP-140), as the ACL APIs carry them.

DescribeAcls, CreateAcls and DeleteAcls, and the authorized-operations bit
fields of Metadata, DescribeGroups and DescribeCluster (KIP-430), use these
numbers. ANY and MATCH only appear in filters; UNKNOWN is what a peer's unknown
value becomes.
"""

from __future__ import annotations

import enum

__all__ = ["AclOperation", "AclPermissionType", "AclResourceType", "PatternType"]


class AclResourceType(enum.IntEnum):
    """What an ACL is about."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """How a resource name is matched: exactly, or as a prefix (filters: ANY, MATCH)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """The operation an ACL allows or denies."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    """Whether an ACL allows or denies."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3
