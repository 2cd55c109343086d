"""Configuration objects: one per component, all frozen.

The package is the table of settings: :mod:`.client` holds the settings every
client shares (:class:`ClientConfig`) and how a configuration is made from keys
(``from_dict``, :func:`make_config`); :mod:`.producer`, :mod:`.consumer`,
:mod:`.share` and :mod:`.admin` each one component's settings and the checks
between them. How one value is coerced is in :mod:`.values`; how a key in any
spelling finds its setting, and which other clients' settings are not taken,
in :mod:`.keys`. Each component's settings load when first named: making each
settings dataclass is a few milliseconds of every import of the client (issue
#48), a program that only produces never needs the consumers', and one that
only administers (``trafka topics list``) never needs any but its own (issue #60).

Rules:

* Every setting has Kafka's dotted name (``linger.ms``) and a Python spelling
  (``linger_ms``); both are accepted, from a mapping or as keyword arguments
  (keywords win over the mapping). Dashes are accepted too (``linger-ms``).
* Values read from properties files arrive as strings; ``"5"``, ``"true"`` and
  ``"a:1,b:2"`` are coerced to the field's type. Anything else of the wrong type,
  or out of range, is a :class:`~trafka.sdk.errors.ConfigError` naming the key.
* An unknown key is a :class:`ConfigError` naming it and the closest known key;
  a key that belongs to another component (``group.id`` given to a producer)
  says so.
* Other clients' names are aliases only where they mean exactly the same
  (librdkafka's ``message.timeout.ms`` is ``delivery.timeout.ms``). One we
  cannot honour as its client defines it (``_NOT_TAKEN``) is refused with what
  to use instead, never with a near name's "did you mean".
* Defaults are Kafka's (Java client, 4.x), except where noted on the field.
* A share consumer (:class:`ShareConsumerConfig`) refuses the consumer
  settings that share groups do not use (``auto.offset.reset``,
  ``enable.auto.commit``, ``isolation.level``, ...), as Java's
  KafkaShareConsumer does, and says where the setting lives instead.
* Settings that depend on each other are resolved once, in ``__post_init__``:
  ``enable.idempotence`` left unset turns on only when ``acks=all``,
  ``retries > 0`` and ``max.in.flight.requests.per.connection <= 5``, as the
  Java client does; set explicitly with a conflicting setting it is an error.
  ``transactional.id`` needs idempotence: with ``enable.idempotence=false`` or a
  conflicting setting it is an error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trafka.common.lazy import lazy_exports

from ..errors import ConfigError as ConfigError  # importable here, as from the module before
from ..errors import ConfigWarning as ConfigWarning
from .client import ClientConfig, components_are, make_config

if TYPE_CHECKING:
    from .admin import AdminConfig
    from .consumer import ConsumerConfig
    from .producer import ProducerConfig
    from .share import ShareConsumerConfig

__all__ = [
    "AdminConfig",
    "ClientConfig",
    "ConsumerConfig",
    "ProducerConfig",
    "ShareConsumerConfig",
    "make_config",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AdminConfig": ".admin",
        "ConsumerConfig": ".consumer",
        "ProducerConfig": ".producer",
        "ShareConsumerConfig": ".share",
    },
)


def _components() -> tuple[type[ClientConfig], ...]:
    from .admin import AdminConfig
    from .consumer import ConsumerConfig
    from .producer import ProducerConfig
    from .share import ShareConsumerConfig

    return (ProducerConfig, ConsumerConfig, ShareConsumerConfig, AdminConfig)


components_are(_components)
