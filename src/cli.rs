//! The command line: `stablemq serve` and friends.

use crate::config::{Config, NodeRole};
use crate::server::{ServeOptions, serve};
use clap::{Parser, Subcommand};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

/// StableMQ: an AMQP 0-9-1 broker with quorum-replicated, no-loss failover.
#[derive(Debug, Parser)]
#[command(name = "stablemq", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the broker (single node with a local event store by default; a
    /// cluster node when the config has a `[cluster]` section).
    Serve(ServeArgs),
    /// Run a store-only cluster node: the config's `[cluster]` node must have
    /// the `store` role; a broker role in the file is ignored.
    Store(ServeArgs),
    /// Load generator: publish and consume against any AMQP 0-9-1 broker and
    /// report rates, latencies and the client's CPU time.
    Perf(crate::perf::PerfArgs),
    /// rabbitmqctl-style commands over the management API (list_queues, cluster_status, ...).
    Ctl(crate::ctl::CtlArgs),
    /// Move the messages of a queue on another broker (a RabbitMQ) into this
    /// one, with confirms on both sides: at worst duplicates, never a loss.
    Shovel(crate::shovel::ShovelArgs),
}

/// RabbitMQ's stream protocol port.
const DEFAULT_STREAM_PORT: u16 = 5552;

/// Flags of `stablemq serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// AMQP port; 0 turns plain AMQP off (AMQPS only).
    #[arg(long, default_value_t = 5672)]
    pub amqp_port: u16,
    /// Port of the RabbitMQ stream protocol (docs/streams.md), 0 turns it
    /// off [default: 5552, skipped with a warning when it is taken].
    #[arg(long)]
    pub stream_port: Option<u16>,
    /// TLS for clients: these flags set (or override) the config's `[tls]`
    /// section; see docs/tls.md.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Address to listen on; repeat for several. Default: every IPv4 and IPv6
    /// address (0.0.0.0 and ::), as RabbitMQ does. Metrics use the first one.
    #[arg(long)]
    pub bind: Vec<IpAddr>,
    /// Directory of the event store [default: the config's `data_dir`, else
    /// ./stablemq-data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// TOML configuration file (users, vhosts, limits).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Log level or tracing filter (error, warn, info, debug, trace).
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Port of the Prometheus `/metrics` endpoint, 0 turns it off [default:
    /// the config's `prometheus_port`, else 15692].
    #[arg(long)]
    pub prometheus_port: Option<u16>,
    /// Port of the management HTTP API, 0 turns it off [default: the config's
    /// `management_port`; in a cluster the node's `management_addr`; else 15672].
    #[arg(long)]
    pub management_port: Option<u16>,
    /// Definitions file (RabbitMQ's JSON export) imported at every boot, as
    /// RabbitMQ's `load_definitions` does: users and permissions in it are
    /// (re)applied, objects that exist already are left alone.
    #[arg(long)]
    pub definitions: Option<PathBuf>,
    /// Threads that run connections and the master [default: the config's
    /// `worker_threads`, else the host's cores shared out among the cluster
    /// nodes the config puts on this host].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub worker_threads: Option<u16>,
}

/// The TLS flags of `stablemq serve`, over the config's `[tls]` section.
#[derive(Debug, Default, clap::Args)]
pub struct TlsArgs {
    /// AMQPS port [default: the config's `[tls] amqps_port`, else 5671].
    #[arg(long)]
    pub amqps_port: Option<u16>,
    /// Server certificate chain (PEM); with `--tls-key-file` turns AMQPS on.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// Server private key (PEM: PKCS#8, RSA or EC).
    #[arg(long)]
    pub tls_key_file: Option<PathBuf>,
    /// CA bundle (PEM) that client certificates must chain to.
    #[arg(long)]
    pub tls_ca_file: Option<PathBuf>,
    /// Ask clients for a certificate and verify it (RabbitMQ's verify_peer).
    #[arg(long)]
    pub tls_verify_peer: bool,
    /// With `--tls-verify-peer`: refuse clients that send no certificate.
    #[arg(long)]
    pub tls_fail_if_no_peer_cert: bool,
    /// Serve the management API over HTTPS on this port too.
    #[arg(long)]
    pub management_https_port: Option<u16>,
    /// Serve the stream protocol over TLS on this port too (RabbitMQ's
    /// usual 5551) [default: the config's `[tls] stream_port`, else none].
    #[arg(long)]
    pub stream_tls_port: Option<u16>,
}

impl TlsArgs {
    /// Put the flags into `tls`, the config's section (created when the
    /// certificate and key are given); the result is validated.
    pub fn apply(self, tls: &mut Option<crate::config::TlsConfig>) -> Result<(), String> {
        if tls.is_none() {
            match (&self.tls_cert_file, &self.tls_key_file) {
                (Some(c), Some(k)) => {
                    *tls = Some(crate::config::TlsConfig::with_files(c.clone(), k.clone()))
                }
                (None, None) if !self.any() => return Ok(()),
                _ => {
                    return Err(
                        "TLS needs both --tls-cert-file and --tls-key-file (or a [tls] section)"
                            .into(),
                    );
                }
            }
        }
        let Some(t) = tls.as_mut() else {
            return Ok(());
        };
        if let Some(c) = self.tls_cert_file {
            t.cert_file = c;
        }
        if let Some(k) = self.tls_key_file {
            t.key_file = k;
        }
        if let Some(ca) = self.tls_ca_file {
            t.ca_file = Some(ca);
        }
        if let Some(p) = self.amqps_port {
            t.amqps_port = p;
        }
        if let Some(p) = self.management_https_port {
            t.management_https_port = Some(p);
        }
        if let Some(p) = self.stream_tls_port {
            t.stream_port = Some(p);
        }
        if self.tls_verify_peer {
            t.verify = crate::config::Verify::VerifyPeer;
        }
        if self.tls_fail_if_no_peer_cert {
            t.fail_if_no_peer_cert = true;
        }
        t.validate()
    }

    fn any(&self) -> bool {
        self.amqps_port.is_some()
            || self.tls_ca_file.is_some()
            || self.tls_verify_peer
            || self.tls_fail_if_no_peer_cert
            || self.management_https_port.is_some()
            || self.stream_tls_port.is_some()
    }
}

/// Parse arguments and run; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => run_serve(args, false),
        Command::Store(args) => run_serve(args, true),
        Command::Perf(args) => crate::perf::main(args),
        Command::Ctl(args) => crate::ctl::main(args),
        Command::Shovel(args) => crate::shovel::main(args),
    }
}

fn run_serve(args: ServeArgs, store_only: bool) -> i32 {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: a log file gets plain lines, as RabbitMQ's.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .init();
    let mut config = match Config::load(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stablemq: {e}");
            return 2;
        }
    };
    if let Err(e) = args
        .tls
        .apply(&mut config.tls)
        .and_then(|()| config.check_stream_tls())
    {
        eprintln!("stablemq: {e}");
        return 2;
    }
    if store_only {
        let Some(cluster) = config.cluster.as_mut() else {
            eprintln!("stablemq: `store` needs a config with a [cluster] section");
            return 2;
        };
        let me = cluster.node;
        if let Some(n) = cluster.nodes.iter_mut().find(|n| n.id == me) {
            if !n.runs(NodeRole::Store) {
                eprintln!("stablemq: node {me} has no store role in the config");
                return 2;
            }
            n.roles = vec![NodeRole::Store];
        }
    }
    let data_dir = args
        .data_dir
        .or_else(|| config.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from("./stablemq-data"));
    let prometheus_port = args
        .prometheus_port
        .or(config.prometheus_port)
        .unwrap_or(15692);
    let management_port = args.management_port.or(config.management_port);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = args
        .worker_threads
        .map_or_else(|| config.worker_threads(cores), usize::from);
    tracing::info!("{workers} worker threads ({cores} cores)");
    let config = Arc::new(config);
    let ipv6_optional = args.bind.is_empty();
    let ips = if args.bind.is_empty() {
        vec![IpAddr::from([0, 0, 0, 0]), IpAddr::from([0u16; 8])]
    } else {
        args.bind
    };
    let opts = ServeOptions {
        prometheus_addr: (prometheus_port != 0).then(|| SocketAddr::new(ips[0], prometheus_port)),
        management_off: management_port == Some(0),
        management_addr: match (management_port, config.cluster.is_some()) {
            (Some(0), _) | (None, true) => None,
            (Some(port), _) => Some(SocketAddr::new(ips[0], port)),
            (None, false) => Some(SocketAddr::new(ips[0], 15672)),
        },
        amqp_ips: ips,
        amqp_port: args.amqp_port,
        stream_port: args.stream_port.unwrap_or(DEFAULT_STREAM_PORT),
        stream_port_optional: args.stream_port.is_none(),
        stream_tls_port: config.tls.as_ref().and_then(|t| t.stream_port),
        listeners: Default::default(),
        ipv6_optional,
        data_dir,
        config,
        definitions: args.definitions,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("stablemq: tokio runtime: {e}");
            return 1;
        }
    };
    match rt.block_on(serve(opts)) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("stablemq: {e}");
            1
        }
    }
}
