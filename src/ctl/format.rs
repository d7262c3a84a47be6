//! How `stablemq ctl` prints lists: an aligned table for people, or with
//! `--formatter json` an array of objects holding only the asked-for columns,
//! as `rabbitmqctl --formatter json` does.
//!
//! Columns are the management API's field names (`messages_ready`,
//! `consumers`, ...), plus the names rabbitmqctl uses where they differ
//! (`source_name`, `destination_kind`, ...), so a `rabbitmqctl list_*` line in
//! an operator's script works with `stablemq ctl` unchanged.

use serde_json::Value;

/// Output style.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Formatter {
    /// Aligned columns with a header line.
    Table,
    /// A JSON array of objects (or the API's own JSON).
    Json,
}

/// What kind of object a list holds, for the column names that differ
/// between rabbitmqctl and the HTTP API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Queues.
    Queue,
    /// Exchanges.
    Exchange,
    /// Bindings.
    Binding,
    /// Connections.
    Connection,
    /// Users.
    User,
    /// Vhosts.
    Vhost,
    /// Permissions.
    Permission,
}

impl Kind {
    /// rabbitmqctl's default columns for this list.
    pub fn default_columns(self) -> &'static [&'static str] {
        match self {
            Kind::Queue => &["name", "messages"],
            Kind::Exchange => &["name", "type"],
            Kind::Binding => &[
                "source_name",
                "source_kind",
                "destination_name",
                "destination_kind",
                "routing_key",
                "arguments",
            ],
            Kind::Connection => &["user", "peer_host", "peer_port", "state"],
            Kind::User => &["name", "tags"],
            Kind::Vhost => &["name"],
            Kind::Permission => &["user", "configure", "write", "read"],
        }
    }
}

/// The value of `column` in one API object, under rabbitmqctl's name or the
/// API's own; `Null` if the object has no such field.
pub fn cell(kind: Kind, obj: &Value, column: &str) -> Value {
    let field = |k: &str| obj.get(k).cloned().unwrap_or(Value::Null);
    match (kind, column) {
        (Kind::Binding, "source_name") => field("source"),
        // Only exchanges are binding sources in AMQP 0-9-1.
        (Kind::Binding, "source_kind") => Value::String("exchange".into()),
        (Kind::Binding, "destination_name") => field("destination"),
        (Kind::Binding, "destination_kind") => field("destination_type"),
        (Kind::User, "tags") => match field("tags") {
            // RabbitMQ before 3.9 sent a comma-separated string.
            Value::String(s) => Value::Array(
                s.split(',')
                    .filter(|t| !t.is_empty())
                    .map(|t| Value::String(t.to_string()))
                    .collect(),
            ),
            other => other,
        },
        _ => field(column),
    }
}

/// One cell as text: strings bare, lists in brackets, objects as JSON.
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(text).collect();
            format!("[{}]", inner.join(", "))
        }
        other => other.to_string(),
    }
}

/// Render `rows` (API objects) with `columns`.
pub fn render(kind: Kind, rows: &[Value], columns: &[String], formatter: Formatter) -> String {
    match formatter {
        Formatter::Json => {
            // Written by hand so that keys keep the asked-for column order
            // (a serde_json Map would sort them).
            let objects: Vec<String> = rows
                .iter()
                .map(|r| {
                    let fields: Vec<String> = columns
                        .iter()
                        .map(|c| format!("{}:{}", Value::String(c.clone()), cell(kind, r, c)))
                        .collect();
                    format!("{{{}}}", fields.join(","))
                })
                .collect();
            if objects.is_empty() {
                "[]\n".into()
            } else {
                format!("[\n{}\n]\n", objects.join(",\n"))
            }
        }
        Formatter::Table => {
            let header: Vec<String> = columns.to_vec();
            let body: Vec<Vec<String>> = rows
                .iter()
                .map(|r| columns.iter().map(|c| text(&cell(kind, r, c))).collect())
                .collect();
            table(&header, &body)
        }
    }
}

/// Columns padded to their widest cell, two spaces apart; numbers are
/// right-aligned when every cell of the column is one.
pub fn table(header: &[String], rows: &[Vec<String>]) -> String {
    let n = header.len();
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    let mut numeric = vec![!rows.is_empty(); n];
    for row in rows {
        for (i, c) in row.iter().enumerate().take(n) {
            width[i] = width[i].max(c.chars().count());
            if !c.is_empty() && c.parse::<f64>().is_err() {
                numeric[i] = false;
            }
        }
    }
    let line = |cells: &[String], out: &mut String| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate().take(n) {
            let pad = width[i].saturating_sub(c.chars().count());
            if i > 0 {
                l.push_str("  ");
            }
            if numeric[i] {
                l.push_str(&" ".repeat(pad));
                l.push_str(c);
            } else {
                l.push_str(c);
                if i + 1 < n {
                    l.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    let mut out = String::new();
    line(header, &mut out);
    for r in rows {
        line(r, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cols(c: &[&str]) -> Vec<String> {
        c.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn table_aligns_text_left_and_numbers_right() {
        let rows = vec![
            json!({"name": "orders", "messages": 10000, "durable": true}),
            json!({"name": "q", "messages": 7, "durable": false}),
        ];
        let out = render(
            Kind::Queue,
            &rows,
            &cols(&["name", "messages", "durable"]),
            Formatter::Table,
        );
        assert_eq!(
            out,
            "name    messages  durable\n\
             orders     10000  true\n\
             q              7  false\n"
        );
    }

    #[test]
    fn json_keeps_only_the_columns_with_their_json_types() {
        let rows = vec![json!({"name": "orders", "messages": 3, "vhost": "/"})];
        let out = render(
            Kind::Queue,
            &rows,
            &cols(&["name", "messages", "missing"]),
            Formatter::Json,
        );
        let v: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(
            v,
            json!([{"name": "orders", "messages": 3, "missing": null}])
        );
        // One object a line, keys in the asked-for order.
        assert_eq!(
            out,
            "[\n{\"name\":\"orders\",\"messages\":3,\"missing\":null}\n]\n"
        );
    }

    #[test]
    fn rabbitmqctl_binding_columns_map_to_api_fields() {
        let b = json!({"source": "amq.topic", "destination": "q1",
            "destination_type": "queue", "routing_key": "a.#", "arguments": {}});
        let out = render(
            Kind::Binding,
            &[b],
            &cols(Kind::Binding.default_columns()),
            Formatter::Table,
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "source_name  source_kind  destination_name  destination_kind  routing_key  arguments"
        );
        assert_eq!(
            lines[1],
            "amq.topic    exchange     q1                queue             a.#          {}"
        );
    }

    #[test]
    fn user_tags_print_as_a_list_in_either_api_shape() {
        for tags in [
            json!(["administrator", "monitoring"]),
            json!("administrator,monitoring"),
        ] {
            let u = json!({"name": "alice", "tags": tags});
            assert_eq!(
                text(&cell(Kind::User, &u, "tags")),
                "[administrator, monitoring]"
            );
        }
        let u = json!({"name": "bob", "tags": ""});
        assert_eq!(text(&cell(Kind::User, &u, "tags")), "[]");
    }

    #[test]
    fn an_empty_list_is_its_header() {
        let out = render(
            Kind::Exchange,
            &[],
            &cols(&["name", "type"]),
            Formatter::Table,
        );
        assert_eq!(out, "name  type\n");
        let out = render(Kind::Exchange, &[], &cols(&["name"]), Formatter::Json);
        assert_eq!(out, "[]\n");
    }
}
