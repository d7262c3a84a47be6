//! What a command runs with (`Ctl`): the list and done outputs every
//! command shares, and the commands with more to them than one request.

use super::{Api, CtlError, Formatter, Kind, enc};
use super::{Columns, CtlArgs, format, watermark_body};
use serde_json::{Value, json};
use std::io::Read;

/// What a command runs with: the API, the flags, and the vhost encoded for
/// a path.
pub(super) struct Ctl<'a> {
    /// The management API of the node.
    pub(super) api: &'a Api,
    /// The flags.
    pub(super) args: &'a CtlArgs,
    /// `args.vhost`, percent-encoded.
    pub(super) v: String,
}

impl Ctl<'_> {
    /// A list command's output: the rows at `path` in the columns asked for
    /// (else the kind's own), without the header line if so asked.
    pub(super) fn list(&self, kind: Kind, path: String, c: &Columns) -> Result<String, CtlError> {
        let f = self.args.formatter;
        let rows = self.api.get(&path)?;
        let rows = rows.as_array().cloned().unwrap_or_default();
        let columns: Vec<String> = if c.columns.is_empty() {
            kind.default_columns()
                .iter()
                .map(|s| s.to_string())
                .collect()
        } else {
            c.columns.clone()
        };
        let out = format::render(kind, &rows, &columns, f);
        Ok(match (f, self.args.no_table_headers) {
            (Formatter::Table, true) => out
                .split_once('\n')
                .map_or(String::new(), |(_, rest)| rest.to_string()),
            _ => out,
        })
    }

    /// The output of a command that did `what`: a line, or a JSON result.
    pub(super) fn done(&self, what: String) -> Result<String, CtlError> {
        Ok(match self.args.formatter {
            Formatter::Json => format!("{}\n", json!({"result": "ok", "message": what})),
            Formatter::Table => format!("{what}\n"),
        })
    }

    /// `delete_queue`, with its `if-empty` and `if-unused` conditions.
    pub(super) fn delete_queue(
        &self,
        name: &str,
        if_empty: bool,
        if_unused: bool,
    ) -> Result<String, CtlError> {
        let mut query = Vec::new();
        if if_empty {
            query.push("if-empty=true");
        }
        if if_unused {
            query.push("if-unused=true");
        }
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{}", query.join("&"))
        };
        let v = &self.v;
        self.api
            .delete(&format!("/api/queues/{v}/{}{q}", enc(name)), &[])?;
        self.done(format!(
            "Deleted queue \"{name}\" in vhost \"{}\"",
            self.args.vhost
        ))
    }

    /// `import_definitions`: post the file, once it is known to be JSON.
    pub(super) fn import_definitions(&self, file: &str) -> Result<String, CtlError> {
        let body = read_input(file)?;
        // Refuse what is not JSON here, with a clear message, rather than
        // in the server's words.
        serde_json::from_slice::<Value>(&body)
            .map_err(|e| CtlError::Usage(format!("{file}: not a JSON file: {e}")))?;
        self.api.post_raw("/api/definitions", body)?;
        self.done(format!("Imported definitions from {file}"))
    }

    /// `export_definitions`: the definitions, pretty-printed, to the file or
    /// (for `-`) as the output.
    pub(super) fn export_definitions(&self, file: &str) -> Result<String, CtlError> {
        let text = self.api.get_text("/api/definitions")?;
        let parsed: Value = serde_json::from_str(&text).map_err(|e| CtlError::BadAnswer {
            url: "/api/definitions".into(),
            detail: e.to_string(),
        })?;
        let mut pretty = serde_json::to_string_pretty(&parsed).unwrap_or(text);
        pretty.push('\n');
        if file == "-" {
            return Ok(pretty);
        }
        std::fs::write(file, pretty).map_err(|source| CtlError::File {
            path: file.to_string(),
            source,
        })?;
        self.done(format!("Exported definitions to {file}"))
    }

    /// `set_vm_memory_high_watermark`, through StableMQ's own endpoint.
    pub(super) fn set_memory_watermark(
        &self,
        value: &str,
        amount: Option<&str>,
    ) -> Result<String, CtlError> {
        let body = watermark_body(value, amount)?;
        match self
            .api
            .put("/api/stablemq/vm-memory-high-watermark", &body)
        {
            Ok(()) => self.done(format!(
                "Set the memory high watermark to {}",
                describe(&body)
            )),
            // RabbitMQ answers 405 to a PUT on a path it does not route.
            Err(e) if matches!(e.status(), Some(404 | 405)) => Err(CtlError::Usage(format!(
                "{e}: this node has no HTTP endpoint for the memory watermark \
                 (RabbitMQ has none); use rabbitmqctl set_vm_memory_high_watermark there"
            ))),
            Err(e) => Err(e),
        }
    }
}

/// The file's bytes, or stdin's for `-`.
fn read_input(file: &str) -> Result<Vec<u8>, CtlError> {
    if file == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|source| CtlError::File {
                path: "stdin".into(),
                source,
            })?;
        return Ok(buf);
    }
    std::fs::read(file).map_err(|source| CtlError::File {
        path: file.to_string(),
        source,
    })
}

/// The watermark a request body sets, for the reply: a fraction or bytes.
fn describe(body: &Value) -> String {
    match (body.get("fraction"), body.get("absolute")) {
        (Some(f), _) => format!("{f} of total memory"),
        (_, Some(a)) => format!("{a} bytes"),
        _ => body.to_string(),
    }
}
