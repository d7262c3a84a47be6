//! `stablemq ctl cluster_status`: every node of the cluster, from
//! `GET /api/nodes`.
//!
//! StableMQ's nodes carry their replication state (role, whether the master
//! hears them on an authenticated node-to-node connection, epoch, stable
//! index, store lag), which is what an operator needs during a failover; RabbitMQ's
//! carry memory and alarms. The same command reads either: it looks at the
//! fields the answer has.

use super::format::{Formatter, table, text};
use super::http::{Api, CtlError};
use crate::management::NodeReport;
use serde_json::Value;

/// Fetch and render the cluster's nodes.
pub fn cluster_status(api: &Api, formatter: Formatter) -> Result<String, CtlError> {
    let raw = api.get("/api/nodes")?;
    let list = raw.as_array().cloned().unwrap_or_default();
    let stablemq = list.iter().any(|n| n.get("epoch").is_some());
    if stablemq {
        let nodes: Vec<NodeReport> =
            serde_json::from_value(raw.clone()).map_err(|e| CtlError::BadAnswer {
                url: "/api/nodes".into(),
                detail: e.to_string(),
            })?;
        return Ok(match formatter {
            Formatter::Json => {
                let mut s = serde_json::to_string_pretty(&nodes).unwrap_or_default();
                s.push('\n');
                s
            }
            Formatter::Table => render(&nodes),
        });
    }
    Ok(match formatter {
        Formatter::Json => {
            let mut s = serde_json::to_string_pretty(&raw).unwrap_or_default();
            s.push('\n');
            s
        }
        Formatter::Table => render_rabbitmq(&list),
    })
}

/// The table for StableMQ's nodes.
pub fn render(nodes: &[NodeReport]) -> String {
    let mut out = format!(
        "{:<4} {:<24} {:<10} {:<9} {:<11} {:>6} {:>12} {:>7} {:>10} {}\n",
        "id",
        "name",
        "role",
        "reachable",
        "replicating",
        "epoch",
        "stable",
        "master",
        "store lag",
        "roles"
    );
    for n in nodes {
        let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        out.push_str(&format!(
            "{:<4} {:<24} {:<10} {:<9} {:<11} {:>6} {:>12} {:>7} {:>10} {}\n",
            n.id,
            n.name,
            n.role,
            if n.reachable { "yes" } else { "no" },
            // The management port answering is not replication: whether
            // the master hears the node on an authenticated connection
            // (with how long ago it last did, when it does not).
            match (n.replicating, n.master_heard_ms_ago) {
                (Some(true), _) => "yes".to_string(),
                (Some(false), Some(ms)) => format!("no ({}s)", ms / 1000),
                (Some(false), None) => "no".to_string(),
                (None, _) => "-".to_string(),
            },
            n.epoch,
            n.stable_index,
            opt(n.master),
            // A store on a new or wiped disk that has not joined yet.
            if n.store.is_some_and(|s| !s.joined) {
                "joining".to_string()
            } else {
                opt(n.store_lag)
            },
            n.roles.join(",")
        ));
    }
    out
}

/// The table for a RabbitMQ cluster's nodes.
pub fn render_rabbitmq(nodes: &[Value]) -> String {
    const COLUMNS: [&str; 7] = [
        "name",
        "type",
        "running",
        "mem_used",
        "mem_limit",
        "mem_alarm",
        "disk_free_alarm",
    ];
    let header: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            COLUMNS
                .iter()
                .map(|c| text(n.get(*c).unwrap_or(&Value::Null)))
                .collect()
        })
        .collect();
    table(&header, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rabbitmq_nodes_show_memory_and_alarms() {
        let n = json!({"name": "rabbit@h", "type": "disc", "running": true,
            "mem_used": 120000000u64, "mem_limit": 800000000u64,
            "mem_alarm": false, "disk_free_alarm": false, "uptime": 5});
        let out = render_rabbitmq(&[n]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "name      type  running   mem_used  mem_limit  mem_alarm  disk_free_alarm"
        );
        assert_eq!(
            lines[1],
            "rabbit@h  disc  true     120000000  800000000  false      false"
        );
    }
}
