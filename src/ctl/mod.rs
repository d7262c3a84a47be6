//! `stablemq ctl`: operator commands in the spirit of `rabbitmqctl`, sent to
//! a node's management HTTP API.
//!
//! Every command uses RabbitMQ's HTTP API paths and JSON shapes, so the same
//! `stablemq ctl` also works against a RabbitMQ 3.x node with the management
//! plugin: handy while migrating, when both brokers run side by side. The one
//! exception is `set_vm_memory_high_watermark`, which RabbitMQ only offers
//! through its Erlang CLI; StableMQ has its own endpoint for it.
//!
//! Command names are rabbitmqctl's (`list_queues`); the kebab-case spelling
//! (`list-queues`) works too.

mod cluster;
mod command;
mod format;
mod http;

pub use cluster::{render, render_rabbitmq};
pub use format::{Formatter, Kind};
pub use http::{Api, CtlError, enc};

use command::Ctl;

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use std::io::Write;

/// Flags of `stablemq ctl`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// Management API of any node (StableMQ or RabbitMQ).
    #[arg(long, global = true, default_value = "http://127.0.0.1:15672")]
    pub url: String,
    /// CA bundle (PEM) that an `https://` --url's certificate must chain
    /// to [default: Mozilla's roots].
    #[arg(long, global = true)]
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// User with the administrator tag (monitoring is enough for lists).
    #[arg(long, global = true, default_value = "guest")]
    pub user: String,
    /// Its password.
    #[arg(long, global = true, default_value = "guest")]
    pub password: String,
    /// Virtual host of the objects (as rabbitmqctl's -p).
    #[arg(short = 'p', long, global = true, default_value = "/")]
    pub vhost: String,
    /// Output: readable table, or JSON.
    #[arg(long, global = true, value_enum, default_value_t = Formatter::Table)]
    pub formatter: Formatter,
    /// Leave out the header line of tables (as rabbitmqctl's flag): one
    /// object per line, for shell loops.
    #[arg(long, global = true)]
    pub no_table_headers: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// `ctl` subcommands.
#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// Every node: StableMQ's role, epoch, stable index, store lag and
    /// reachability (or RabbitMQ's memory and alarms).
    #[command(name = "cluster_status", alias = "cluster-status")]
    ClusterStatus {
        /// Same as --formatter json.
        #[arg(long)]
        json: bool,
    },
    /// Queues of the vhost [columns: name messages].
    #[command(name = "list_queues", alias = "list-queues")]
    ListQueues(Columns),
    /// Exchanges of the vhost [columns: name type].
    #[command(name = "list_exchanges", alias = "list-exchanges")]
    ListExchanges(Columns),
    /// Bindings of the vhost [columns: source_name source_kind
    /// destination_name destination_kind routing_key arguments].
    #[command(name = "list_bindings", alias = "list-bindings")]
    ListBindings(Columns),
    /// Client connections [columns: user peer_host peer_port state].
    #[command(name = "list_connections", alias = "list-connections")]
    ListConnections(Columns),
    /// Users [columns: name tags].
    #[command(name = "list_users", alias = "list-users")]
    ListUsers(Columns),
    /// Virtual hosts [columns: name].
    #[command(name = "list_vhosts", alias = "list-vhosts")]
    ListVhosts(Columns),
    /// Permissions in the vhost [columns: user configure write read].
    #[command(name = "list_permissions", alias = "list-permissions")]
    ListPermissions(Columns),
    /// Create a user (or change its password).
    #[command(name = "add_user", alias = "add-user")]
    AddUser {
        /// User name.
        name: String,
        /// Password. (Its own id: the global --password is the caller's.)
        #[arg(id = "new_password", value_name = "PASSWORD")]
        password: String,
        /// Tags, comma-separated (administrator, monitoring, management,
        /// policymaker).
        #[arg(long, default_value = "")]
        tags: String,
    },
    /// Delete a user.
    #[command(name = "delete_user", alias = "delete-user")]
    DeleteUser {
        /// User name.
        name: String,
    },
    /// Create a virtual host.
    #[command(name = "add_vhost", alias = "add-vhost")]
    AddVhost {
        /// Vhost name.
        name: String,
    },
    /// Grant a user configure, write and read regexes on the vhost (-p).
    #[command(name = "set_permissions", alias = "set-permissions")]
    SetPermissions {
        /// User name. (Its own id: the global --user is the caller.)
        #[arg(id = "grantee", value_name = "USER")]
        user: String,
        /// Configure regex.
        configure: String,
        /// Write regex.
        write: String,
        /// Read regex.
        read: String,
    },
    /// Delete a queue (and its messages).
    #[command(name = "delete_queue", alias = "delete-queue")]
    DeleteQueue {
        /// Queue name.
        name: String,
        /// Only if it has no messages.
        #[arg(long)]
        if_empty: bool,
        /// Only if it has no consumers.
        #[arg(long)]
        if_unused: bool,
    },
    /// Remove every ready message from a queue.
    #[command(name = "purge_queue", alias = "purge-queue")]
    PurgeQueue {
        /// Queue name.
        name: String,
    },
    /// Force-close a client connection (320 CONNECTION_FORCED).
    #[command(name = "close_connection", alias = "close-connection")]
    CloseConnection {
        /// The connection's name, as list_connections name shows it.
        name: String,
        /// Reason given to the client.
        #[arg(default_value = "closed by stablemq ctl")]
        explanation: String,
    },
    /// Import a definitions file (RabbitMQ's JSON format; `-` for stdin).
    #[command(name = "import_definitions", alias = "import-definitions")]
    ImportDefinitions {
        /// The file.
        file: String,
    },
    /// Export every definition (RabbitMQ's JSON format) to a file (`-` for stdout).
    #[command(name = "export_definitions", alias = "export-definitions")]
    ExportDefinitions {
        /// The file.
        file: String,
    },
    /// Change the memory alarm threshold of the node at --url until it
    /// restarts: a fraction of total memory (0.4), or `absolute BYTES`
    /// (bytes, or with a unit: 512MiB, 2GB).
    #[command(
        name = "set_vm_memory_high_watermark",
        alias = "set-vm-memory-high-watermark"
    )]
    SetVmMemoryHighWatermark {
        /// A fraction, or the word `absolute`.
        value: String,
        /// With `absolute`: the limit.
        amount: Option<String>,
    },
}

/// Columns of a list command.
#[derive(Debug, Args)]
pub struct Columns {
    /// Columns to show (the API's field names, or rabbitmqctl's).
    pub columns: Vec<String>,
}

/// Run a ctl command; returns the exit code.
pub fn main(args: CtlArgs) -> i32 {
    let tls = match args.tls_ca_file.as_deref().map(http::trusting).transpose() {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("stablemq ctl: {e}");
            return 2;
        }
    };
    let api = Api::with_tls(&args.url, &args.user, &args.password, tls);
    match run(&api, &args) {
        Ok(out) => {
            // A closed pipe (`| head`) is not an error worth a panic.
            let _ = write!(std::io::stdout(), "{out}");
            0
        }
        Err(CtlError::Usage(e)) => {
            eprintln!("stablemq ctl: {e}");
            2
        }
        Err(e) => {
            eprintln!("stablemq ctl: {e}");
            1
        }
    }
}

/// Run one command and return what it prints.
pub fn run(api: &Api, args: &CtlArgs) -> Result<String, CtlError> {
    let ctl = Ctl {
        api,
        args,
        v: enc(&args.vhost),
    };
    let (v, f) = (&ctl.v, args.formatter);
    match &args.command {
        CtlCommand::ClusterStatus { json } => {
            let f = if *json { Formatter::Json } else { f };
            cluster::cluster_status(api, f)
        }
        CtlCommand::ListQueues(c) => ctl.list(Kind::Queue, format!("/api/queues/{v}"), c),
        CtlCommand::ListExchanges(c) => ctl.list(Kind::Exchange, format!("/api/exchanges/{v}"), c),
        CtlCommand::ListBindings(c) => ctl.list(Kind::Binding, format!("/api/bindings/{v}"), c),
        CtlCommand::ListConnections(c) => ctl.list(Kind::Connection, "/api/connections".into(), c),
        CtlCommand::ListUsers(c) => ctl.list(Kind::User, "/api/users".into(), c),
        CtlCommand::ListVhosts(c) => ctl.list(Kind::Vhost, "/api/vhosts".into(), c),
        CtlCommand::ListPermissions(c) => {
            ctl.list(Kind::Permission, format!("/api/vhosts/{v}/permissions"), c)
        }
        CtlCommand::AddUser {
            name,
            password,
            tags,
        } => {
            api.put(
                &format!("/api/users/{}", enc(name)),
                &json!({"password": password, "tags": tags}),
            )?;
            ctl.done(format!("Added user \"{name}\""))
        }
        CtlCommand::DeleteUser { name } => {
            api.delete(&format!("/api/users/{}", enc(name)), &[])?;
            ctl.done(format!("Deleted user \"{name}\""))
        }
        CtlCommand::AddVhost { name } => {
            api.put(&format!("/api/vhosts/{}", enc(name)), &json!({}))?;
            ctl.done(format!("Added vhost \"{name}\""))
        }
        CtlCommand::SetPermissions {
            user,
            configure,
            write,
            read,
        } => {
            api.put(
                &format!("/api/permissions/{v}/{}", enc(user)),
                &json!({"configure": configure, "write": write, "read": read}),
            )?;
            ctl.done(format!(
                "Set permissions for user \"{user}\" in vhost \"{}\"",
                args.vhost
            ))
        }
        CtlCommand::DeleteQueue {
            name,
            if_empty,
            if_unused,
        } => ctl.delete_queue(name, *if_empty, *if_unused),
        CtlCommand::PurgeQueue { name } => {
            api.delete(&format!("/api/queues/{v}/{}/contents", enc(name)), &[])?;
            ctl.done(format!(
                "Purged queue \"{name}\" in vhost \"{}\"",
                args.vhost
            ))
        }
        CtlCommand::CloseConnection { name, explanation } => {
            api.delete(
                &format!("/api/connections/{}", enc(name)),
                &[("x-reason", explanation.as_str())],
            )?;
            ctl.done(format!("Closed connection \"{name}\""))
        }
        CtlCommand::ImportDefinitions { file } => ctl.import_definitions(file),
        CtlCommand::ExportDefinitions { file } => ctl.export_definitions(file),
        CtlCommand::SetVmMemoryHighWatermark { value, amount } => {
            ctl.set_memory_watermark(value, amount.as_deref())
        }
    }
}

/// The request body for `set_vm_memory_high_watermark VALUE [AMOUNT]`, with
/// rabbitmqctl's syntax: `0.4`, or `absolute 1073741824`, or `absolute 1GiB`.
pub fn watermark_body(value: &str, amount: Option<&str>) -> Result<Value, CtlError> {
    match (value, amount) {
        ("absolute", Some(a)) => Ok(json!({"absolute": parse_bytes(a)?})),
        ("absolute", None) => Err(CtlError::Usage(
            "absolute needs a limit: absolute 1073741824, or 1GiB, 512MB".into(),
        )),
        (f, None) => {
            let fraction: f64 = f
                .parse()
                .map_err(|_| CtlError::Usage(format!("{f:?} is not a fraction (0.4)")))?;
            if !fraction.is_finite() || fraction < 0.0 {
                return Err(CtlError::Usage(format!(
                    "the fraction must be 0 or more, not {f}"
                )));
            }
            Ok(json!({"fraction": fraction}))
        }
        (other, Some(_)) => Err(CtlError::Usage(format!(
            "expected a fraction, or `absolute AMOUNT`, not {other:?}"
        ))),
    }
}

/// Bytes from RabbitMQ's memory units: a plain number, or with k/kiB, M/MiB,
/// G/GiB (powers of 1024) or kB, MB, GB (powers of 1000).
pub fn parse_bytes(s: &str) -> Result<u64, CtlError> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| CtlError::Usage(format!("{s:?} is not an amount of memory")))?;
    let mult: u64 = match unit {
        "" => 1,
        "k" | "K" | "KiB" | "kiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => {
            return Err(CtlError::Usage(format!(
                "unknown memory unit {other:?} (use k, KiB, M, MiB, G, GiB, kB, MB or GB)"
            )));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| CtlError::Usage(format!("{s} is too large")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        ctl: CtlArgs,
    }

    #[test]
    fn memory_units_follow_rabbitmq() {
        assert_eq!(parse_bytes("1073741824").ok(), Some(1 << 30));
        assert_eq!(parse_bytes("1GiB").ok(), Some(1 << 30));
        assert_eq!(parse_bytes("2GB").ok(), Some(2_000_000_000));
        assert_eq!(parse_bytes("512MiB").ok(), Some(512 << 20));
        assert_eq!(parse_bytes("10k").ok(), Some(10_240));
        assert!(parse_bytes("1TB").is_err());
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("99999999999999999999G").is_err());
    }

    #[test]
    fn watermark_takes_rabbitmqctl_syntax() {
        assert_eq!(
            watermark_body("0.4", None).ok(),
            Some(json!({"fraction": 0.4}))
        );
        assert_eq!(
            watermark_body("absolute", Some("1GiB")).ok(),
            Some(json!({"absolute": 1u64 << 30}))
        );
        assert!(watermark_body("absolute", None).is_err());
        assert!(watermark_body("-0.1", None).is_err());
        assert!(watermark_body("NaN", None).is_err());
        assert!(watermark_body("relative", Some("3")).is_err());
    }

    #[test]
    fn both_spellings_and_trailing_flags_parse() {
        let a = Cli::try_parse_from(["x", "list_queues", "name", "messages_ready", "-p", "v1"])
            .expect("parse");
        assert_eq!(a.ctl.vhost, "v1");
        match a.ctl.command {
            CtlCommand::ListQueues(c) => assert_eq!(c.columns, ["name", "messages_ready"]),
            other => panic!("parsed as {other:?}"),
        }
        let a = Cli::try_parse_from(["x", "cluster-status", "--json"]).expect("parse");
        assert!(matches!(
            a.ctl.command,
            CtlCommand::ClusterStatus { json: true }
        ));
        let a = Cli::try_parse_from(["x", "cluster_status", "--formatter", "json"]).expect("parse");
        assert_eq!(a.ctl.formatter, Formatter::Json);
        assert!(Cli::try_parse_from(["x", "list_queues", "--formatter", "xml"]).is_err());
        // Positional user names and passwords do not clobber the caller's.
        let a = Cli::try_parse_from([
            "x",
            "--user",
            "admin",
            "--password",
            "pw",
            "add_user",
            "bob",
            "bobs-pw",
        ])
        .expect("parse");
        assert_eq!(
            (a.ctl.user.as_str(), a.ctl.password.as_str()),
            ("admin", "pw")
        );
        match a.ctl.command {
            CtlCommand::AddUser { name, password, .. } => {
                assert_eq!((name.as_str(), password.as_str()), ("bob", "bobs-pw"))
            }
            other => panic!("parsed as {other:?}"),
        }
        let a = Cli::try_parse_from([
            "x",
            "set_permissions",
            "bob",
            "^a",
            ".*",
            "",
            "--user",
            "admin",
        ])
        .expect("parse");
        assert_eq!(a.ctl.user, "admin");
        match a.ctl.command {
            CtlCommand::SetPermissions {
                user,
                configure,
                write,
                read,
            } => {
                assert_eq!([user, configure, write, read], ["bob", "^a", ".*", ""]);
            }
            other => panic!("parsed as {other:?}"),
        }
    }
}
