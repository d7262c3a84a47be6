//! `stablemq ctl`: operator commands against a running node's management API,
//! in the spirit of `rabbitmqctl`.

use crate::management::NodeReport;
use clap::{Args, Subcommand};
use std::io::Write;
use std::time::Duration;

/// Flags of `stablemq ctl`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// Management API of any node.
    #[arg(long, default_value = "http://127.0.0.1:15672")]
    pub url: String,
    /// User with the administrator or monitoring tag.
    #[arg(long, default_value = "guest")]
    pub user: String,
    /// Its password.
    #[arg(long, default_value = "guest")]
    pub password: String,
    /// What to do.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// `ctl` subcommands.
#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// Every node's role, epoch, stable index, store lag and reachability.
    ClusterStatus {
        /// Print the JSON the API returned instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Run a ctl command; returns the exit code.
pub fn main(args: CtlArgs) -> i32 {
    match args.command {
        CtlCommand::ClusterStatus { json } => {
            match fetch_nodes(&args.url, &args.user, &args.password) {
                // A closed pipe (`| head`) is not an error worth a panic.
                Ok(nodes) if json => {
                    let text = serde_json::to_string_pretty(&nodes).unwrap_or_default();
                    let _ = writeln!(std::io::stdout(), "{text}");
                    0
                }
                Ok(nodes) => {
                    let _ = write!(std::io::stdout(), "{}", render(&nodes));
                    0
                }
                Err(e) => {
                    eprintln!("stablemq ctl: {e}");
                    1
                }
            }
        }
    }
}

fn fetch_nodes(url: &str, user: &str, password: &str) -> Result<Vec<NodeReport>, String> {
    use base64::Engine;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let url = format!("{}/api/nodes", url.trim_end_matches('/'));
    let mut resp = agent
        .get(&url)
        .header("authorization", &format!("Basic {token}"))
        .call()
        .map_err(|e| format!("GET {url}: {e}"))?;
    resp.body_mut()
        .read_json::<Vec<NodeReport>>()
        .map_err(|e| format!("GET {url}: unexpected answer: {e}"))
}

/// The table `cluster-status` prints.
pub fn render(nodes: &[NodeReport]) -> String {
    let mut out = format!(
        "{:<4} {:<24} {:<10} {:<9} {:>6} {:>12} {:>7} {:>10} {}\n",
        "id", "name", "role", "reachable", "epoch", "stable", "master", "store lag", "roles"
    );
    for n in nodes {
        let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        out.push_str(&format!(
            "{:<4} {:<24} {:<10} {:<9} {:>6} {:>12} {:>7} {:>10} {}\n",
            n.id,
            n.name,
            n.role,
            if n.reachable { "yes" } else { "no" },
            n.epoch,
            n.stable_index,
            opt(n.master),
            opt(n.store_lag),
            n.roles.join(",")
        ));
    }
    out
}
