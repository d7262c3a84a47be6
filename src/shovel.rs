//! `stablemq shovel`: move the messages of one queue on a source broker (a
//! RabbitMQ being retired) into StableMQ, losing none.
//!
//! The protocol is the one RabbitMQ's own shovel uses in its safest mode
//! (`on-confirm`):
//!
//! 1. consume the source queue with manual acks and a prefetch window;
//! 2. publish each message to the destination on a channel in confirm mode,
//!    `mandatory`, with its properties, headers and body unchanged;
//! 3. ack a source message only after the destination confirmed it (with
//!    `multiple`, up to the newest confirmed tag: deliveries and confirms are
//!    both in order, so every older one is confirmed too).
//!
//! So a message leaves the source only once the destination has it on disk.
//! If the shovel (or either broker, or the network) dies part-way, every
//! message the source has not seen acked is requeued there and is moved again
//! by the next run: the destination may get a message twice, never zero times.
//! A destination nack, or a message returned as unroutable (no queue bound),
//! stops the shovel with an error before that message is acked at the source.

use clap::Args;
use serde::Serialize;
use std::time::Duration;

mod session;
mod tls;

pub use session::run;

/// Flags of `stablemq shovel`.
#[derive(Debug, Clone, Args)]
pub struct ShovelArgs {
    /// Source broker, e.g. amqp://guest:guest@old-rabbit:5672/%2f, or
    /// amqps:// with RabbitMQ's TLS query parameters (`cacertfile`,
    /// `certfile`, `keyfile`).
    #[arg(long)]
    pub src_uri: String,
    /// Queue to drain on the source broker.
    #[arg(long)]
    pub src_queue: String,
    /// Destination broker, e.g. amqp://guest:guest@127.0.0.1:5672/%2f.
    #[arg(long)]
    pub dest_uri: String,
    /// Publish to this exchange at the destination [default: publish to the
    /// queue named by --dest-queue through the default exchange].
    #[arg(long, conflicts_with = "dest_queue")]
    pub dest_exchange: Option<String>,
    /// Routing key for --dest-exchange [default: each message's original
    /// routing key].
    #[arg(long, requires = "dest_exchange")]
    pub dest_routing_key: Option<String>,
    /// Destination queue [default: the source queue's name]. It must exist
    /// (import the definitions first); the shovel checks before moving anything.
    #[arg(long)]
    pub dest_queue: Option<String>,
    /// CA bundle (PEM) for an amqps:// URI without `cacertfile`
    /// [default: the system's CA store].
    #[arg(long)]
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// Unacked messages the source may hand the shovel at once.
    #[arg(long, default_value_t = 1000)]
    pub prefetch: u16,
    /// Messages published to the destination but not yet confirmed, at most.
    #[arg(long, default_value_t = 1000)]
    pub confirm_window: usize,
    /// Stop once the source queue is empty (else keep moving new messages
    /// until Ctrl-C or --max-messages).
    #[arg(long)]
    pub exit_when_empty: bool,
    /// Stop after moving this many messages.
    #[arg(long)]
    pub max_messages: Option<u64>,
    /// Print the final report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Why a shovel stopped before it finished.
#[derive(Debug, thiserror::Error)]
pub enum ShovelError {
    /// The source broker refused or dropped something.
    #[error("source {uri}: {what}: {source}")]
    Source {
        /// The source URI without its password.
        uri: String,
        /// The operation that failed.
        what: &'static str,
        /// lapin's error.
        source: lapin::Error,
    },
    /// The destination broker refused or dropped something.
    #[error("destination {uri}: {what}: {source}")]
    Dest {
        /// The destination URI without its password.
        uri: String,
        /// The operation that failed.
        what: &'static str,
        /// lapin's error.
        source: lapin::Error,
    },
    /// The destination nacked a message: it did not take responsibility for it,
    /// so it stays at the source.
    #[error("destination nacked a message (source delivery tag {0}); it stays in the source queue")]
    Nacked(u64),
    /// The destination had no queue for a message (it came back as returned).
    #[error(
        "destination could not route a message to exchange {exchange:?} with routing key {routing_key:?} \
         ({reply}); declare the queue or import the definitions first. It stays in the source queue"
    )]
    Unroutable {
        /// Exchange published to.
        exchange: String,
        /// Routing key published with.
        routing_key: String,
        /// The broker's reply text.
        reply: String,
    },
    /// The source broker cancelled the shovel's consumer (queue deleted).
    #[error("the source broker cancelled the consumer of {0:?} (queue deleted?)")]
    Cancelled(String),
    /// Flags that make no sense together.
    #[error("{0}")]
    Usage(String),
}

/// What a run did; printed at the end.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ShovelReport {
    /// Messages published to the destination.
    pub published: u64,
    /// Messages the destination confirmed and the source was told to forget:
    /// the messages moved.
    pub moved: u64,
    /// Of those, how many the source flagged as redelivered (a previous run
    /// may already have moved them: possible duplicates).
    pub redelivered: u64,
    /// Messages ready in the source queue when the shovel stopped.
    pub source_remaining: u32,
    /// Wall time in milliseconds.
    pub elapsed_ms: u64,
}

/// How long without a delivery before `--exit-when-empty` asks the source
/// whether its queue is empty.
const IDLE_CHECK: Duration = Duration::from_millis(300);

/// Entry point of `stablemq shovel`; returns the exit code.
pub fn main(args: ShovelArgs) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("stablemq shovel: tokio runtime: {e}");
            return 1;
        }
    };
    match rt.block_on(run(&args)) {
        Ok(report) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string(&report).unwrap_or_else(|_| "{}".into())
                );
            } else {
                println!("{}", describe(&args, &report));
            }
            0
        }
        Err(ShovelError::Usage(e)) => {
            eprintln!("stablemq shovel: {e}");
            2
        }
        Err(e) => {
            eprintln!("stablemq shovel: {e}");
            1
        }
    }
}

/// The one-line summary printed after a run.
pub fn describe(args: &ShovelArgs, r: &ShovelReport) -> String {
    let secs = r.elapsed_ms as f64 / 1000.0;
    let rate = if secs > 0.0 {
        r.moved as f64 / secs
    } else {
        0.0
    };
    format!(
        "moved {} messages from queue {:?} on {} to {} in {:.2} s ({:.0} msg/s); \
         {} were redeliveries; {} left ready in the source queue",
        r.moved,
        args.src_queue,
        redact(&args.src_uri),
        redact(&args.dest_uri),
        secs,
        rate,
        r.redelivered,
        r.source_remaining
    )
}

/// `uri` with its password replaced by `***`, for messages and logs.
pub fn redact(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_string();
    };
    // Userinfo ends at the last '@' before the path.
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                user.to_string()
            };
            format!("{scheme}://{masked}{}", &rest[at..])
        }
        None => uri.to_string(),
    }
}

/// Where every message goes at the destination.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// The default exchange, routing key = queue name.
    Queue(String),
    /// An exchange, with a fixed routing key or (None) each message's own.
    Exchange(String, Option<String>),
}

impl Target {
    fn of(args: &ShovelArgs) -> Target {
        match (&args.dest_exchange, &args.dest_queue) {
            (Some(x), _) => Target::Exchange(x.clone(), args.dest_routing_key.clone()),
            (None, Some(q)) => Target::Queue(q.clone()),
            (None, None) => Target::Queue(args.src_queue.clone()),
        }
    }

    /// Exchange and routing key for a message that arrived with `original`.
    fn route<'a>(&'a self, original: &'a str) -> (&'a str, &'a str) {
        match self {
            Target::Queue(q) => ("", q),
            Target::Exchange(x, Some(rk)) => (x, rk),
            Target::Exchange(x, None) => (x, original),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(
            redact("amqp://guest:s3cret@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(
            redact("amqp://guest@127.0.0.1:5672/%2f"),
            "amqp://guest@127.0.0.1:5672/%2f"
        );
        assert_eq!(redact("amqp://127.0.0.1/v@x"), "amqp://127.0.0.1/v@x");
        assert_eq!(redact("not a uri"), "not a uri");
    }

    fn args(dest_queue: Option<&str>, x: Option<&str>, rk: Option<&str>) -> ShovelArgs {
        ShovelArgs {
            src_uri: "amqp://a".into(),
            src_queue: "orders".into(),
            dest_uri: "amqp://b".into(),
            dest_exchange: x.map(Into::into),
            dest_routing_key: rk.map(Into::into),
            dest_queue: dest_queue.map(Into::into),
            tls_ca_file: None,
            prefetch: 10,
            confirm_window: 10,
            exit_when_empty: true,
            max_messages: None,
            json: false,
        }
    }

    #[test]
    fn target_defaults_to_the_queue_of_the_same_name() {
        let t = Target::of(&args(None, None, None));
        assert_eq!(t.route("whatever"), ("", "orders"));
        let t = Target::of(&args(Some("other"), None, None));
        assert_eq!(t.route("whatever"), ("", "other"));
        let t = Target::of(&args(None, Some("x"), None));
        assert_eq!(t.route("rk.1"), ("x", "rk.1"));
        let t = Target::of(&args(None, Some("x"), Some("fixed")));
        assert_eq!(t.route("rk.1"), ("x", "fixed"));
    }
}
