//! The Prometheus text exposition format (version 0.0.4), written by hand for
//! the series computed at scrape time (queue depths, totals, node facts).
//!
//! rabbitmq_prometheus writes one `# HELP` and one `# TYPE` line per family,
//! then its samples; Prometheus rejects a family that appears twice in one
//! scrape, so each family is written in one go.

use std::fmt::Write;

/// A family's type, as the `# TYPE` line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (Prometheus applies `rate` to it).
    Counter,
    /// Goes up and down.
    Gauge,
    /// RabbitMQ uses this for info series and alarm flags.
    Untyped,
    /// Cumulative buckets plus `_sum` and `_count`.
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Untyped => "untyped",
            Kind::Histogram => "histogram",
        }
    }
}

/// A scrape's text, built family by family.
#[derive(Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// Start a family: its help and type lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Self {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.as_str());
        self
    }

    /// One sample of the family just started (or a `_bucket`, `_sum`,
    /// `_count` series of a histogram).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", format_value(value));
        self
    }

    /// A family with a single unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) -> &mut Self {
        self.family(name, kind, help).sample(name, &[], value)
    }

    /// Append text that is already in the exposition format (the recorder's).
    pub fn raw(&mut self, text: &str) -> &mut Self {
        self.out.push_str(text);
        if !text.is_empty() && !text.ends_with('\n') {
            self.out.push('\n');
        }
        self
    }

    /// The finished text.
    pub fn finish(self) -> String {
        self.out
    }
}

/// Label values may hold any UTF-8; the format escapes backslash, quote and
/// newline.
fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Whole numbers without a fraction (counts are the common case), and the
/// format's spelling of infinities and NaN.
fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_escaping() {
        let mut e = Exposition::default();
        e.family(
            "rabbitmq_queue_messages",
            Kind::Gauge,
            "Sum of ready\nand unacked",
        )
        .sample(
            "rabbitmq_queue_messages",
            &[("vhost", "/"), ("queue", "a\"b\\c\nd")],
            3.0,
        )
        .sample("rabbitmq_queue_messages", &[], 0.5);
        e.single("rabbitmq_build_info", Kind::Untyped, "info", 1.0);
        e.raw("x 1");
        let text = e.finish();
        assert_eq!(
            text,
            "# HELP rabbitmq_queue_messages Sum of ready\\nand unacked\n\
             # TYPE rabbitmq_queue_messages gauge\n\
             rabbitmq_queue_messages{vhost=\"/\",queue=\"a\\\"b\\\\c\\nd\"} 3\n\
             rabbitmq_queue_messages 0.5\n\
             # HELP rabbitmq_build_info info\n\
             # TYPE rabbitmq_build_info untyped\n\
             rabbitmq_build_info 1\n\
             x 1\n"
        );
    }

    #[test]
    fn values_use_the_formats_spelling() {
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(1e20), "100000000000000000000");
        assert_eq!(format_value(-2.0), "-2");
        assert_eq!(format_value(0.25), "0.25");
    }
}
