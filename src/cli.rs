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
}

/// Flags of `stablemq serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// AMQP port.
    #[arg(long, default_value_t = 5672)]
    pub amqp_port: u16,
    /// Address to listen on (AMQP and metrics).
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: IpAddr,
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
    let opts = ServeOptions {
        amqp_addr: SocketAddr::new(args.bind, args.amqp_port),
        prometheus_addr: (args.prometheus_port != 0)
            .then(|| SocketAddr::new(args.bind, args.prometheus_port)),
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
