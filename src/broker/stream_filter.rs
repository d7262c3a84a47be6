//! Stream filtering (RabbitMQ 3.13+): a filter value per entry, a filter
//! per consumer, and the decision whether a chunk (or an entry) goes out.
//!
//! The filter value is stored with the entry as the
//! [`FILTER_VALUE_HEADER`] header, so it is logged, replicated and restored
//! with it: an AMQP 0-9-1 publisher sets the header itself; a stream-protocol
//! publish v2 message gets it from its filter value (`server::stream`), and
//! no stream-protocol reader sees it (it gets the record as sent).
//!
//! A consumer's filter is a set of values and whether entries without a
//! value match (`match-unfiltered`). RabbitMQ decides per chunk with a bloom
//! filter (false positives possible); here the set is exact. A chunk goes out
//! if one of its entries matches; clients filter the entries themselves, as
//! RabbitMQ's contract asks.
//!
//! What it is not: where the decision is applied (the master for AMQP 0-9-1
//! consumers, per entry; the stream bridge for stream-protocol
//! subscriptions, per stored chunk).

use super::message::Message;
use stablemq_protocol::{AMQPValue, FieldTable};
use std::collections::HashSet;

/// The header an entry's filter value is stored under (RabbitMQ's AMQP
/// 0-9-1 publish header).
pub const FILTER_VALUE_HEADER: &str = "x-stream-filter-value";

/// basic.consume argument: the filter values (a string or an array of
/// strings).
pub const FILTER_ARG: &str = "x-stream-filter";

/// basic.consume argument: entries without a filter value match too (a
/// bool; default false).
pub const MATCH_UNFILTERED_ARG: &str = "x-stream-match-unfiltered";

/// Subscribe properties of the stream protocol: `filter.<anything>` keys
/// hold the values, `match-unfiltered` is `true` or not.
const FILTER_PROPERTY_PREFIX: &str = "filter.";
const MATCH_UNFILTERED_PROPERTY: &str = "match-unfiltered";

/// A consumer's filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamFilter {
    values: HashSet<String>,
    match_unfiltered: bool,
}

impl StreamFilter {
    /// A filter on `values`, with or without the entries that have none.
    pub fn new(values: impl IntoIterator<Item = String>, match_unfiltered: bool) -> StreamFilter {
        StreamFilter {
            values: values.into_iter().collect(),
            match_unfiltered,
        }
    }

    /// The filter of a basic.consume, as RabbitMQ 3.13's
    /// `rabbit_stream_queue:filter_spec` reads it: `x-stream-filter` a
    /// string, or an array whose strings are the values (anything else in
    /// it is ignored); any other type means no filter, not an error.
    /// `x-stream-match-unfiltered` counts only as a bool (otherwise false).
    pub fn from_consume_args(args: &FieldTable) -> Option<StreamFilter> {
        let values: Vec<String> = match args.inner().get(FILTER_ARG)? {
            AMQPValue::FieldArray(a) => a.as_slice().iter().filter_map(string).collect(),
            v => vec![string(v)?],
        };
        let match_unfiltered = matches!(
            args.inner().get(MATCH_UNFILTERED_ARG),
            Some(AMQPValue::Boolean(true))
        );
        Some(StreamFilter::new(values, match_unfiltered))
    }

    /// The filter of a stream-protocol subscribe, as RabbitMQ's
    /// `rabbit_stream_utils:filter_spec` reads it: the values of every
    /// `filter.*` property; none means no filter. `match-unfiltered` is
    /// true only as the string `true`.
    pub fn from_properties(properties: &[(String, String)]) -> Option<StreamFilter> {
        let values: Vec<String> = properties
            .iter()
            .filter(|(k, _)| k.starts_with(FILTER_PROPERTY_PREFIX))
            .map(|(_, v)| v.clone())
            .collect();
        if values.is_empty() {
            return None;
        }
        let match_unfiltered = properties
            .iter()
            .any(|(k, v)| k == MATCH_UNFILTERED_PROPERTY && v == "true");
        Some(StreamFilter::new(values, match_unfiltered))
    }

    /// Whether an entry with this filter value (None: without one) matches.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match value {
            Some(v) => self.values.contains(v),
            None => self.match_unfiltered,
        }
    }

    /// Whether a chunk whose entries have these filter values goes out: one
    /// of them matches. An empty chunk does not.
    pub fn chunk_matches<'a>(&self, values: impl IntoIterator<Item = Option<&'a str>>) -> bool {
        values.into_iter().any(|v| self.matches(v))
    }
}

/// A string value of a field table (RabbitMQ takes `longstr` only; a short
/// string is the same text). Invalid UTF-8 is taken lossily.
fn string(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

/// The filter value stored with `msg` (its [`FILTER_VALUE_HEADER`] header,
/// if that is a string, as RabbitMQ takes it).
pub fn filter_value(msg: &Message) -> Option<&str> {
    match msg
        .properties
        .headers()
        .as_ref()?
        .inner()
        .get(FILTER_VALUE_HEADER)?
    {
        AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stablemq_protocol::{FieldArray, ShortString};

    fn args(pairs: Vec<(&str, AMQPValue)>) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in pairs {
            t.insert(ShortString::from(k), v);
        }
        t
    }

    fn ls(s: &str) -> AMQPValue {
        AMQPValue::LongString(s.into())
    }

    #[test]
    fn a_chunk_matches_if_one_entry_does() {
        let f = StreamFilter::new(["a".to_owned()], false);
        assert!(f.chunk_matches([Some("b"), Some("a")]));
        assert!(!f.chunk_matches([Some("b"), Some("b")]));
        assert!(!f.chunk_matches([None, Some("b")]));
        assert!(!f.chunk_matches(std::iter::empty()));
        let u = StreamFilter::new(["a".to_owned()], true);
        assert!(u.chunk_matches([Some("b"), None]));
        assert!(!u.chunk_matches([Some("b"), Some("c")]));
        assert!(u.chunk_matches([Some("a")]));
    }

    #[test]
    fn consume_arguments_read_as_rabbitmq_reads_them() {
        assert_eq!(StreamFilter::from_consume_args(&args(vec![])), None);
        let f = StreamFilter::from_consume_args(&args(vec![(FILTER_ARG, ls("a"))]));
        assert_eq!(f, Some(StreamFilter::new(["a".to_owned()], false)));
        let arr = AMQPValue::FieldArray(FieldArray::from(vec![
            ls("a"),
            AMQPValue::LongLongInt(3),
            ls("b"),
        ]));
        let f = StreamFilter::from_consume_args(&args(vec![
            (FILTER_ARG, arr),
            (MATCH_UNFILTERED_ARG, AMQPValue::Boolean(true)),
        ]));
        assert_eq!(
            f,
            Some(StreamFilter::new(["a".to_owned(), "b".to_owned()], true))
        );
        // Not a string nor an array: no filter, as RabbitMQ 3.13.
        let f = StreamFilter::from_consume_args(&args(vec![(FILTER_ARG, AMQPValue::LongInt(1))]));
        assert_eq!(f, None);
        // A match-unfiltered that is not a bool is false.
        let f = StreamFilter::from_consume_args(&args(vec![
            (FILTER_ARG, ls("a")),
            (MATCH_UNFILTERED_ARG, ls("true")),
        ]));
        assert_eq!(f, Some(StreamFilter::new(["a".to_owned()], false)));
        // match-unfiltered alone is no filter.
        let f = StreamFilter::from_consume_args(&args(vec![(
            MATCH_UNFILTERED_ARG,
            AMQPValue::Boolean(true),
        )]));
        assert_eq!(f, None);
    }

    #[test]
    fn subscribe_properties_read_as_rabbitmq_reads_them() {
        let p = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect()
        };
        assert_eq!(StreamFilter::from_properties(&p(&[("name", "x")])), None);
        assert_eq!(
            StreamFilter::from_properties(&p(&[("match-unfiltered", "true")])),
            None
        );
        let f = StreamFilter::from_properties(&p(&[
            ("filter.0", "a"),
            ("filter.1", "b"),
            ("match-unfiltered", "false"),
        ]));
        assert_eq!(
            f,
            Some(StreamFilter::new(["a".to_owned(), "b".to_owned()], false))
        );
        let f =
            StreamFilter::from_properties(&p(&[("filter.x", "a"), ("match-unfiltered", "true")]));
        assert_eq!(f, Some(StreamFilter::new(["a".to_owned()], true)));
    }
}
