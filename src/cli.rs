//! The command line: `stablemq serve` and friends.

use crate::config::Config;
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
    /// Run the broker (single node with a local event store by default).
    Serve(ServeArgs),
    /// Load generator: publish and consume against any AMQP 0-9-1 broker and
    /// report rates, latencies and the client's CPU time.
    Perf(crate::perf::PerfArgs),
}

/// Flags of `stablemq serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// AMQP port.
    #[arg(long, default_value_t = 5672)]
    pub amqp_port: u16,
    /// Address to listen on; repeat for several. Default: every IPv4 and IPv6
    /// address (0.0.0.0 and ::), as RabbitMQ does. Metrics use the first one.
    #[arg(long)]
    pub bind: Vec<IpAddr>,
    /// Directory of the event store.
    #[arg(long, default_value = "./stablemq-data")]
    pub data_dir: PathBuf,
    /// TOML configuration file (users, vhosts, limits).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Log level or tracing filter (error, warn, info, debug, trace).
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Port of the Prometheus `/metrics` endpoint (0 turns it off).
    #[arg(long, default_value_t = 15692)]
    pub prometheus_port: u16,
}

/// Parse arguments and run; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => run_serve(args),
        Command::Perf(args) => crate::perf::main(args),
    }
}

fn run_serve(args: ServeArgs) -> i32 {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
    let config = match Config::load(args.config.as_deref()) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("stablemq: {e}");
            return 2;
        }
    };
    let ipv6_optional = args.bind.is_empty();
    let ips = if args.bind.is_empty() {
        vec![IpAddr::from([0, 0, 0, 0]), IpAddr::from([0u16; 8])]
    } else {
        args.bind
    };
    let opts = ServeOptions {
        prometheus_addr: (args.prometheus_port != 0)
            .then(|| SocketAddr::new(ips[0], args.prometheus_port)),
        amqp_ips: ips,
        amqp_port: args.amqp_port,
        ipv6_optional,
        data_dir: args.data_dir,
        config,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
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
