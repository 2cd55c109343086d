"""``trafka broker``: run brokerlite from the command line.

With no options it serves on 127.0.0.1:9092 with its data in ``./trafka-data``,
private to this machine's network unless ``--announce`` puts it on zeroconf.
Settings come from, lowest priority first: the defaults, ``--config FILE``
(Kafka ``server.properties`` names) and the options given. It logs one line
when ready, naming the address (and the security protocol, unless PLAINTEXT),
and shuts down cleanly on SIGINT or SIGTERM.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from trafka.common.logformat import CHATTY, LINE_FORMAT

from .config import PROTOCOL_VERSIONS, BrokerConfig, ConfigError
from .errors import BrokerError

__all__ = ["STANDARD_AUTHORIZER", "cluster_command", "command"]

#: What ``--authorizer`` sets ``authorizer.class.name`` to: Kafka's KRaft authorizer.
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

# option name -> BrokerConfig field (options left at None are not applied)
_OPTION_FIELDS = {
    "data_dir": "data_dir",
    "node_id": "node_id",
    "num_partitions": "num_partitions",
    "max_partitions": "max_partitions",
    "auto_create_topics": "auto_create_topics",
    "log_segment_bytes": "log_segment_bytes",
    "log_retention_ms": "log_retention_ms",
    "log_retention_bytes": "log_retention_bytes",
    "message_max_bytes": "message_max_bytes",
    "flush_interval_messages": "flush_interval_messages",
    "flush_interval_ms": "flush_interval_ms",
    "group_initial_rebalance_delay_ms": "group_initial_rebalance_delay_ms",
    "security_protocol": "security_protocol",
    "sasl_mechanisms": "sasl_enabled_mechanisms",
    "sasl_users_file": "sasl_users_file",
    "ssl_certfile": "ssl_certfile",
    "ssl_keyfile": "ssl_keyfile",
    "ssl_cafile": "ssl_cafile",
    "ssl_client_auth": "ssl_client_auth",
    "announce": "announce",
    "metrics_listen": "metrics_listen",
    "console_listen": "console_listen",
    "schema_registry_listen": "schema_registry_listen",
    "zookeeper": "zookeeper_connect",
    "default_replication_factor": "default_replication_factor",
    "min_insync_replicas": "min_insync_replicas",
    "protocol": "protocol_version",
}


def build_config(config_file: Path | None, options: dict[str, Any]) -> BrokerConfig:
    """The effective config: defaults, then ``config_file``, then the options set.

    Raises:
        ConfigError: an unknown key in the file or an invalid value.
    """
    # A development broker stays private unless asked (--announce, or
    # announce=true in the file): off here as in the library.
    base = BrokerConfig()
    config = BrokerConfig.from_properties(config_file, base) if config_file else base
    overrides: dict[str, Any] = {}
    if options.get("listen") is not None:
        overrides["listen"] = options["listen"]
    if options.get("advertised_listener") is not None:
        overrides["advertised_listener"] = options["advertised_listener"]
    for option, field in _OPTION_FIELDS.items():
        if options.get(option) is not None:
            overrides[field] = options[option]
    if options.get("sasl_user"):
        overrides["sasl_users"] = tuple(options["sasl_user"])
    if options.get("authorizer"):
        overrides["authorizer_class_name"] = STANDARD_AUTHORIZER
    if options.get("super_user"):
        overrides["super_users"] = tuple(options["super_user"])
    if options.get("allow_everyone_if_no_acl_found"):
        overrides["allow_everyone_if_no_acl_found"] = True
    config = config.with_overrides(overrides) if overrides else config
    if not config.authorizer_class_name:
        # Without an authorizer these options would silently do nothing.
        for option in ("super_user", "allow_everyone_if_no_acl_found"):
            if options.get(option):
                flag = "--" + option.replace("_", "-")
                raise ConfigError(
                    f"{flag} needs an authorizer: add --authorizer (or set "
                    "authorizer.class.name in the --config file)"
                )
    return config


def _configure_logging(verbose: bool, *quiet: str) -> None:
    """INFO (DEBUG with ``verbose``) to stderr; the ``quiet`` loggers at WARNING
    unless verbose (libraries such as trio and kazoo are chatty)."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format=LINE_FORMAT,
    )
    if not verbose:
        for name in quiet:
            logging.getLogger(name).setLevel(logging.WARNING)


@click.command("broker")
@click.option(
    "--listen",
    metavar="HOST:PORT",
    help="Address to listen on; a scheme sets the security protocol too "
    "(SASL_SSL://HOST:PORT) [127.0.0.1:9092].",
)
@click.option(
    "--advertised-listener",
    metavar="HOST:PORT",
    help="Address given to clients in metadata [the listening address].",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for topics, offsets and broker metadata [./trafka-data].",
)
@click.option("--node-id", type=int, help="This broker's node id [1].")
@click.option("--num-partitions", type=int, help="Partitions of auto-created topics [1].")
@click.option(
    "--max-partitions",
    type=click.IntRange(min=1),
    help="The most partitions the broker holds [what the open-file limit allows].",
)
@click.option(
    "--auto-create-topics/--no-auto-create-topics",
    default=None,
    help="Create unknown topics when clients ask for their metadata [on].",
)
@click.option("--log-segment-bytes", type=int, help="Segment size [1073741824].")
@click.option("--log-retention-ms", type=int, help="Keep records this long; -1 forever [7 days].")
@click.option("--log-retention-bytes", type=int, help="Keep this much per partition; -1 all [-1].")
@click.option("--message-max-bytes", type=int, help="Largest record batch accepted [1048588].")
@click.option("--flush-interval-messages", type=int, help="fsync after this many messages [OS].")
@click.option("--flush-interval-ms", type=int, help="fsync at least this often [OS].")
@click.option(
    "--group-initial-rebalance-delay-ms",
    type=int,
    help="Wait this long for more members before a new group's first rebalance [3000].",
)
@click.option(
    "--security-protocol",
    type=click.Choice(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"], case_sensitive=False),
    help="The listener's security protocol (also the scheme of --listen) [PLAINTEXT].",
)
@click.option(
    "--sasl-user",
    metavar="NAME:PASSWORD",
    multiple=True,
    help="A user SASL accepts (repeat for more). Visible to other local users in the "
    "process list: prefer --sasl-users-file.",
)
@click.option(
    "--sasl-users-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file of SASL users, one NAME:PASSWORD a line.",
)
@click.option(
    "--sasl-mechanisms",
    metavar="LIST",
    help="Comma-separated SASL mechanisms offered [PLAIN,SCRAM-SHA-256,SCRAM-SHA-512].",
)
@click.option(
    "--ssl-certfile",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The broker's certificate chain (PEM; may hold the key too).",
)
@click.option(
    "--ssl-keyfile",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The broker's private key (PEM).",
)
@click.option(
    "--ssl-cafile",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="CA certificates (PEM) that client certificates must chain to.",
)
@click.option(
    "--ssl-client-auth",
    type=click.Choice(["none", "requested", "required"], case_sensitive=False),
    help="Ask clients for a certificate signed by --ssl-cafile [none].",
)
@click.option(
    "--authorizer",
    is_flag=True,
    default=None,
    help="Authorize requests by ACLs (Kafka's standard authorizer); manage them with "
    "`trafka acls`. Deny what no ACL allows unless --allow-everyone-if-no-acl-found.",
)
@click.option(
    "--super-user",
    metavar="TYPE:NAME",
    multiple=True,
    help="A principal allowed everything, e.g. User:admin (repeatable; needs --authorizer).",
)
@click.option(
    "--allow-everyone-if-no-acl-found",
    is_flag=True,
    default=None,
    help="Allow everyone on resources no ACL names (needs --authorizer) [deny].",
)
@click.option(
    "--metrics-listen",
    metavar="HOST:PORT",
    help="Serve Prometheus metrics (/metrics) and health (/healthz, /readyz) over HTTP here.",
)
@click.option(
    "--console-listen",
    metavar="HOST:PORT",
    help="Serve the web console for this broker's cluster here, e.g. 127.0.0.1:8080 "
    "(needs trafka[console]; a password comes from TRAFKA_CONSOLE_PASSWORD, and without "
    "one a console on a non-loopback address is read-only).",
)
@click.option(
    "--schema-registry-listen",
    metavar="HOST:PORT",
    help="Serve a Schema Registry (Confluent's REST API, schemas kept in the _schemas "
    "topic) here (needs trafka[schemas]).",
)
@click.option(
    "--announce/--no-announce",
    default=None,
    help="Announce the listener on the local network (zeroconf, _kafka._tcp) [off].",
)
@click.option(
    "--zookeeper",
    metavar="HOST:PORT[/CHROOT]",
    help="Join the cluster coordinated by this ZooKeeper (Kafka's zookeeper.connect) "
    "[single node, no ZooKeeper].",
)
@click.option(
    "--default-replication-factor",
    type=click.IntRange(min=1),
    help="Replicas of topics created without a replication factor (cluster mode) [1].",
)
@click.option(
    "--min-insync-replicas",
    type=click.IntRange(min=1),
    help="Default min.insync.replicas of topics (a single node is one in-sync replica, "
    "so above 1 it refuses acks=all) [1].",
)
@click.option(
    "--protocol",
    type=click.Choice(PROTOCOL_VERSIONS),
    help="Serve the request versions of this Kafka release: 3.9 also serves what "
    "Kafka 4.0 removed (KIP-896), for clients older than Kafka 4 [3.9].",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A Kafka server.properties file (options given here win).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log every connection and request error.")
def command(config_file: Path | None, verbose: bool, **options: Any) -> None:
    """Run brokerlite, a Kafka-compatible broker: a single node, or with --zookeeper a
    member of a cluster of brokerlite nodes (``trafka cluster`` starts a whole one).

    \b
    With SASL/SCRAM over TLS, for example:
      trafka broker --listen SASL_SSL://0.0.0.0:9093 --sasl-users-file users.txt \\
        --sasl-mechanisms SCRAM-SHA-512 --ssl-certfile broker.pem --ssl-keyfile broker.key

    \b
    With ACLs, admin managing them:
      trafka broker --listen SASL_PLAINTEXT://127.0.0.1:9092 --sasl-users-file users.txt \\
        --authorizer --super-user User:admin
    """
    try:
        config = build_config(config_file, options)
    except (ConfigError, OSError) as exc:
        raise click.UsageError(str(exc)) from None
    if config.console_listen is not None:
        from .companions import find

        try:
            find("console")
        except BrokerError as exc:
            raise click.UsageError(f"--console-listen: {exc}") from None
    if config.schema_registry_listen is not None:
        from .registry import missing

        reason = missing()
        if reason is not None:
            raise click.UsageError(f"--schema-registry-listen: {reason}")
    # httpx: a line per request of the console's registry client (--console-listen).
    _configure_logging(verbose, "trio", "kazoo", "hypercorn", "trafka.console.http", *CHATTY)
    from .server import run_broker

    try:
        run_broker(config)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    except (OSError, BrokerError) as exc:
        raise click.ClickException(f"cannot start the broker: {exc}") from None


@click.group("cluster", invoke_without_command=True)
@click.option(
    "--nodes",
    type=click.IntRange(min=1, max=64),
    default=3,
    show_default=True,
    help="How many brokers.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("trafka-cluster"),
    show_default=True,
    help="Where ZooKeeper's and every broker's data live (kept across runs), and the "
    "state file that `trafka cluster node` reads.",
)
@click.option(
    "--zookeeper",
    metavar="HOST:PORT[/CHROOT]",
    help="Use this ZooKeeper instead of starting a private one.",
)
@click.option(
    "--num-partitions",
    type=int,
    default=3,
    show_default=True,
    help="Partitions of topics created without a count.",
)
@click.option(
    "--default-replication-factor",
    type=click.IntRange(min=1),
    help="Replicas of topics created without a factor [min(3, nodes)].",
)
@click.option(
    "--min-insync-replicas",
    type=click.IntRange(min=1),
    help="Default min.insync.replicas of topics [min(2, nodes)].",
)
@click.option(
    "--session-timeout-ms",
    type=click.IntRange(min=1000),
    help="The brokers' ZooKeeper session timeout: how soon a killed node is noticed [6000].",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Kafka server.properties settings for every node (security, for instance: "
    "listeners=SASL_PLAINTEXT://:0 names the listener; each node gets its own address). "
    "The options given here win.",
)
@click.option("-v", "--verbose", is_flag=True, help="The brokers log at DEBUG (in node-<id>.log).")
@click.pass_context
def cluster_command(
    ctx: click.Context,
    config_file: Path | None,
    nodes: int,
    data_dir: Path,
    zookeeper: str | None,
    num_partitions: int,
    default_replication_factor: int | None,
    min_insync_replicas: int | None,
    session_timeout_ms: int | None,
    verbose: bool,
) -> None:
    """Run a whole brokerlite cluster on this machine: a private ZooKeeper and N
    brokers on free loopback ports, each broker a process of its own.

    \b
    Prints each node's id, address and pid, and reports a node that exits; Ctrl-C
    (or SIGTERM) stops every node, then ZooKeeper. From another terminal:
      trafka cluster node list            # each node's address, pid and state
      trafka cluster node stop 2          # a clean shutdown (SIGTERM)
      trafka cluster node kill 2          # kill -9
      trafka cluster node start 2         # same id, port and data; it rejoins
    (give them the cluster's --data-dir when it is not ./trafka-cluster).
    """
    if ctx.invoked_subcommand is not None:
        return
    import trio

    from .dev.local_cluster import DEFAULT_SESSION_TIMEOUT_MS, ClusterProcesses
    from .dev.supervisor import ClusterSupervisor, ControlError
    from .dev.zookeeper_server import ZooKeeperError

    factor = default_replication_factor or min(3, nodes)
    min_isr = min_insync_replicas or min(2, nodes)
    given = _cluster_file_settings(config_file)
    settings: dict[str, Any] = {
        "num.partitions": num_partitions,
        "default.replication.factor": factor,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": factor,
        "zookeeper.session.timeout.ms": session_timeout_ms or DEFAULT_SESSION_TIMEOUT_MS,
    }
    # The file wins over the options' defaults; an option given wins over the file.
    defaulted = {
        "num.partitions": "num_partitions",
        "default.replication.factor": "default_replication_factor",
        "min.insync.replicas": "min_insync_replicas",
        "offsets.topic.replication.factor": "default_replication_factor",
        "zookeeper.session.timeout.ms": "session_timeout_ms",
    }
    for key, value in given.items():
        option = defaulted.get(key)
        source = None if option is None else ctx.get_parameter_source(option)
        if source is None or source is click.core.ParameterSource.DEFAULT:
            settings[key] = value
    processes = ClusterProcesses(
        data_dir.absolute(),
        nodes,
        settings=settings,
        zookeeper_connect=zookeeper,
        detached=True,
        broker_args=("--verbose",) if verbose else (),
    )
    supervisor = ClusterSupervisor(processes, lambda line: click.echo(line, err=True))
    try:
        supervisor.start()
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    except (ZooKeeperError, ControlError, RuntimeError, OSError) as exc:
        raise click.ClickException(f"cannot run the cluster: {exc}") from None

    def announce() -> None:
        zk_pid = processes.zookeeper.pid if processes.zookeeper is not None else None
        click.echo(
            f"brokerlite cluster of {nodes} node(s), ZooKeeper at {processes.zookeeper_connect}"
            + (f" (pid {zk_pid})" if zk_pid is not None else "")
            + f", data in {data_dir}"
        )
        for node in supervisor.nodes():
            click.echo(f"node {node['id']}: {node['address']} pid {node['pid']}")
        click.echo(f"bootstrap servers: {processes.bootstrap_servers}", color=False)
        if processes.listener != "PLAINTEXT":
            click.echo(f"listener: {processes.listener} (clients need its security settings)")
        click.echo(f"control: trafka cluster node list|stop|start|kill --data-dir {data_dir}")

    try:
        status = trio.run(supervisor.run, announce)
    except BaseException:
        # A signal before run() watched them: nothing may be left running.
        processes.stop()
        raise
    ctx.exit(status)


# Set by `trafka cluster` for each node: a --config file may not give them.
_PER_NODE_KEYS = (
    "node.id",
    "broker.id",
    "log.dirs",
    "log.dir",
    "data_dir",
    "zookeeper.connect",
    "advertised.listeners",
    "advertised.listener",
)


def _cluster_file_settings(path: Path | None) -> dict[str, str]:
    """The settings of ``trafka cluster --config`` (checked when each node's file is read)."""
    if path is None:
        return {}
    from .config_keys import parse_properties

    try:
        settings = dict(parse_properties(path.read_text(encoding="utf-8"), str(path)))
    except (ConfigError, OSError, UnicodeDecodeError) as exc:
        raise click.UsageError(f"--config: {exc}") from None
    refused = [key for key in _PER_NODE_KEYS if key in settings]
    if refused:
        raise click.UsageError(
            f"--config: {', '.join(refused)} differ per node; trafka cluster sets them "
            "(use --data-dir and --zookeeper)"
        )
    return settings


_DATA_DIR_OPTION = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("trafka-cluster"),
    show_default=True,
    help="The running cluster's --data-dir (its supervisor's cluster.json is there).",
)


@cluster_command.group("node")
def node_group() -> None:
    """Stop, kill, start or list the nodes of a running `trafka cluster`."""


def _control(data_dir: Path, command: str, node: int | None) -> Any:
    from .dev.supervisor import ControlError, control

    try:
        return control(data_dir, command, node)
    except ControlError as exc:
        raise click.ClickException(str(exc)) from None


def _echo_nodes(nodes: list[dict[str, Any]]) -> None:
    click.echo(f"{'NODE':<6}{'STATE':<9}{'PID':<9}{'ADDRESS':<22}LAST EXIT")
    for node in nodes:
        pid = "-" if node["pid"] is None else str(node["pid"])
        last = node["last_exit"] or "-"
        click.echo(f"{node['id']:<6}{node['state']:<9}{pid:<9}{node['address']:<22}{last}")


@node_group.command("list")
@_DATA_DIR_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
def node_list(data_dir: Path, as_json: bool) -> None:
    """Each node's id, state, pid, address and last exit."""
    import json

    reply = _control(data_dir, "list", None)
    if as_json:
        click.echo(json.dumps(reply["nodes"], indent=2))
    else:
        _echo_nodes(reply["nodes"])


def _node_command(name: str, doc: str) -> None:
    @node_group.command(name, help=doc)
    @click.argument("node_id", type=int)
    @_DATA_DIR_OPTION
    def run(node_id: int, data_dir: Path) -> None:
        reply = _control(data_dir, name, node_id)
        _echo_nodes([n for n in reply["nodes"] if n["id"] == node_id])


_node_command("stop", "Stop a node cleanly (SIGTERM): its ZooKeeper registration goes at once.")
_node_command(
    "kill", "Kill a node with SIGKILL, as kill -9: ZooKeeper notices when its session expires."
)
_node_command(
    "start",
    "Start a stopped node again, with its id, port and data directory; returns once it "
    "has rejoined.",
)
