//! Jepsen-style partition runs of a real 3-node StableMQ cluster, each node
//! in its own network namespace (see `compat_tests::jepsen`). Needs root.
//!
//! ```sh
//! jepsen --short                 # every nemesis once, about 60 s (the test command)
//! jepsen --minutes 30 --seed 7   # seeded random nemeses (scripts/jepsen.sh)
//! jepsen --clean                 # remove what killed runs left behind
//! ```
//!
//! Prints a result table and exits 1 if an invariant broke.

use clap::Parser;
use compat_tests::jepsen::{Options, run};
use std::process::ExitCode;
use std::time::Duration;

/// Command-line flags.
#[derive(Parser, Debug)]
#[command(about = "Partition a real StableMQ cluster in network namespaces and check the history")]
struct Args {
    /// Every nemesis once, briefly, instead of random ones.
    #[arg(long, conflicts_with = "minutes")]
    short: bool,
    /// Minutes of random nemeses.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Seed of the random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Confirming publishers.
    #[arg(long, default_value_t = 3)]
    publishers: u64,
    /// Messages a second per publisher, at most.
    #[arg(long, default_value_t = 200)]
    rate: u32,
    /// The nodes' check_quorum_ms.
    #[arg(long, default_value_t = 1000)]
    check_quorum_ms: u64,
    /// Slack over check_quorum_ms for a cut-off master to close its clients.
    #[arg(long, default_value_t = 1000)]
    close_slack_ms: u64,
    /// Only remove namespaces, links and processes of dead runs, then exit.
    #[arg(long)]
    clean: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.clean {
        compat_tests::netns::clean_stale();
        return ExitCode::SUCCESS;
    }
    let opts = Options {
        duration: (!args.short).then(|| Duration::from_secs_f64(args.minutes * 60.0)),
        seed: args.seed,
        publishers: args.publishers,
        rate: args.rate,
        check_quorum_ms: args.check_quorum_ms,
        close_slack_ms: args.close_slack_ms,
    };
    let verdict = run(&opts);
    if verdict.violations.is_empty() {
        println!("jepsen: all invariants held");
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
