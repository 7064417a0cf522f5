"""NamesrvConfig: every knob of one nameserver, with RocketMQ's defaults.

The executable (``pocketmq nameserver``) builds one from a TOML file and flags
through :mod:`pocketmq.common.configfile`; library code never reads files or
the environment. Field metadata carries the ``--help`` text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pocketmq.common.errors import ConfigError

__all__ = ["DEFAULT_NAMESRV_PORT", "NamesrvConfig"]

DEFAULT_NAMESRV_PORT = 9876  # RocketMQ NamesrvConfig listenPort


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True, slots=True, kw_only=True)
class NamesrvConfig:
    # Interface the gRPC server binds, loopback by default like the broker's;
    # "0.0.0.0" = every IPv4 interface.
    host: str = field(
        default="127.0.0.1",
        metadata=_help("interface to listen on (0.0.0.0 = every IPv4 interface)"),
    )
    # TCP port, default 9876 (listenPort); 0 binds a free port (tests).
    port: int = field(default=DEFAULT_NAMESRV_PORT, metadata=_help("gRPC port; 0 picks a free one"))
    # Seconds of silence after which a broker is dropped, default 120
    # (DEFAULT_BROKER_CHANNEL_EXPIRED_TIME); a broker may ask for its own.
    broker_expire_seconds: float = field(
        default=120.0, metadata=_help("seconds without a registration before a broker is dropped")
    )
    # Seconds between liveness scans, default 5 (scanNotActiveBrokerInterval).
    scan_interval_seconds: float = field(
        default=5.0, metadata=_help("seconds between scans for silent brokers")
    )
    # Seconds in-flight RPCs get to finish on shutdown, default 5.
    shutdown_grace_seconds: float = field(
        default=5.0, metadata=_help("seconds in-flight requests get to finish on shutdown")
    )
    # Port of the Prometheus /metrics endpoint (nameserver/metrics.py), on host;
    # -1 = off (the default), 0 = any free port.
    metrics_port: int = field(
        default=-1,
        metadata=_help("port of the Prometheus /metrics endpoint; -1 = off, 0 = any free port"),
    )
    # ACL (security/): brokers register with admin keys, clients read with any user's.
    acl_enable: bool = field(
        default=False,
        metadata=_help("require signed requests, checked against acl_file (aclEnable)"),
    )
    acl_file: str = field(
        default="", metadata=_help("the ACL (TOML, README 'Security'); required with acl_enable")
    )
    # TLS (security/tls.py): a certificate and key turn it on.
    tls_cert_file: str = field(
        default="",
        metadata=_help("PEM certificate chain of the nameserver; with tls_key_file turns TLS on"),
    )
    tls_key_file: str = field(default="", metadata=_help("PEM private key of tls_cert_file"))
    tls_ca_file: str = field(
        default="",
        metadata=_help("PEM CA that signs client certificates (with tls_require_client_auth)"),
    )
    tls_require_client_auth: bool = field(
        default=False, metadata=_help("refuse clients without a certificate signed by tls_ca_file")
    )

    # Controller (pocketmq/controller): automatic failover (RocketMQ's enableControllerInNamesrv).
    controller_enable: bool = field(
        default=False,
        metadata=_help(
            "run the controller in this nameserver: it elects a new master when one stops "
            "heartbeating (enableControllerInNamesrv)"
        ),
    )
    controller_etcd: str = field(
        default="",
        metadata=_help(
            "keep the controller's state in etcd (http://h1:2379,h2:2379); several nameservers "
            "then run it, one active at a time; empty = a file in controller_data_dir"
        ),
    )
    controller_etcd_prefix: str = field(
        default="/pocketmq/default/controller",
        metadata=_help("etcd key prefix of this deployment's controller state"),
    )
    controller_data_dir: str = field(
        default="./pocketmq-controller",
        metadata=_help("directory of the file-backed controller state (controller.json)"),
    )
    controller_broker_inactive_ms: int = field(
        default=3000,
        metadata=_help("ms without a heartbeat after which the controller replaces a master"),
    )
    controller_scan_interval_ms: int = field(
        default=1000, metadata=_help("ms between the controller's scans for silent masters")
    )
    controller_lease_ttl_s: int = field(
        default=3,
        metadata=_help("seconds of the etcd lease that makes one controller the active one"),
    )
    controller_elect_unclean_master: bool = field(
        default=False,
        metadata=_help(
            "allow electing a replica outside the in-sync set (can lose acknowledged "
            "messages; enableElectUncleanMaster)"
        ),
    )
    controller_advertise_addr: str = field(
        default="",
        metadata=_help(
            "host:port brokers reach this controller at, told to them by standbys; empty = "
            "the nameserver's listen address (loopback for a wildcard host)"
        ),
    )

    def __post_init__(self) -> None:
        for name in (
            "controller_broker_inactive_ms",
            "controller_scan_interval_ms",
            "controller_lease_ttl_s",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.controller_etcd and not self.controller_enable:
            raise ConfigError("controller_etcd needs controller_enable (--controller)")
        if not self.host or self.host != self.host.strip():
            raise ConfigError(f"host must be an interface name or address, got {self.host!r}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535 (0 = any free port), got {self.port}")
        if not -1 <= self.metrics_port <= 65535 or self.metrics_port == self.port != 0:
            raise ConfigError(
                f"metrics_port is {self.metrics_port}; give 1..65535 other than "
                f"port ({self.port}), 0 for any free port or -1 for off"
            )
        for name in ("broker_expire_seconds", "scan_interval_seconds"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.shutdown_grace_seconds < 0:
            raise ConfigError(
                f"shutdown_grace_seconds must be >= 0, got {self.shutdown_grace_seconds}"
            )
        if self.scan_interval_seconds > self.broker_expire_seconds:
            raise ConfigError(
                f"scan_interval_seconds ({self.scan_interval_seconds}) must not exceed "
                f"broker_expire_seconds ({self.broker_expire_seconds}); a silent broker would "
                f"outlive its expiry by up to a whole scan interval"
            )

    @property
    def broker_expire_ms(self) -> int:
        return int(self.broker_expire_seconds * 1000)
