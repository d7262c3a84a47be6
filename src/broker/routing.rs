//! Pure routing predicates for the topic and headers exchange types.
//!
//! They are pure functions of (binding, message) so exchange code stays simple and
//! these rules, where RabbitMQ's semantics are subtle, are unit-tested here.

use stablemq_protocol::{AMQPValue, FieldTable};

/// Does a topic binding pattern match a routing key?
///
/// Words are separated by `.`; `*` matches exactly one word and `#` matches zero or
/// more words. Empty words inside a key are words (RabbitMQ treats "a..b" as three
/// words), but the empty key has none.
pub fn topic_matches(pattern: &str, routing_key: &str) -> bool {
    // The empty string has zero words (so `*` does not match it), as in RabbitMQ.
    let p = words(pattern);
    let k = words(routing_key);
    // Iterative matcher with one backtrack point per `#`: O(p * k) worst case.
    let (mut pi, mut ki) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if pi < p.len() && p[pi] == "#" {
            star = Some((pi, ki));
            pi += 1;
            continue;
        }
        if ki == k.len() && pi == p.len() {
            return true;
        }
        if ki < k.len() && pi < p.len() && (p[pi] == "*" || p[pi] == k[ki]) {
            pi += 1;
            ki += 1;
            continue;
        }
        // Mismatch: let the last `#` swallow one more word, if any is left.
        match star {
            Some((sp, sk)) if sk < k.len() => {
                star = Some((sp, sk + 1));
                pi = sp + 1;
                ki = sk + 1;
            }
            _ => return false,
        }
    }
}

fn words(s: &str) -> Vec<&str> {
    if s.is_empty() {
        Vec::new()
    } else {
        s.split('.').collect()
    }
}

/// The `x-match` mode of a headers binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadersMatch {
    /// Every binding header must match; `x-` keys are ignored.
    All,
    /// At least one binding header must match; `x-` keys are ignored.
    Any,
    /// Like `All`, including `x-` keys.
    AllWithX,
    /// Like `Any`, including `x-` keys.
    AnyWithX,
}

impl HeadersMatch {
    /// Read `x-match` from binding arguments; `None` means an invalid value.
    pub fn from_args(args: &FieldTable) -> Option<HeadersMatch> {
        match args.inner().get("x-match") {
            None => Some(HeadersMatch::All),
            Some(v) => match as_str(v)? {
                "all" => Some(HeadersMatch::All),
                "any" => Some(HeadersMatch::Any),
                "all-with-x" => Some(HeadersMatch::AllWithX),
                "any-with-x" => Some(HeadersMatch::AnyWithX),
                _ => None,
            },
        }
    }
}

fn as_str(v: &AMQPValue) -> Option<&str> {
    match v {
        AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str()),
        _ => None,
    }
}

/// RabbitMQ compares header values by type class: all integers are one class, both
/// floats another, and other types only equal themselves.
fn values_equal(a: &AMQPValue, b: &AMQPValue) -> Option<bool> {
    fn int(v: &AMQPValue) -> Option<i128> {
        Some(match v {
            AMQPValue::ShortShortInt(x) => *x as i128,
            AMQPValue::ShortShortUInt(x) => *x as i128,
            AMQPValue::ShortInt(x) => *x as i128,
            AMQPValue::ShortUInt(x) => *x as i128,
            AMQPValue::LongInt(x) => *x as i128,
            AMQPValue::LongUInt(x) => *x as i128,
            AMQPValue::LongLongInt(x) => *x as i128,
            _ => return None,
        })
    }
    fn float(v: &AMQPValue) -> Option<f64> {
        match v {
            AMQPValue::Float(x) => Some(*x as f64),
            AMQPValue::Double(x) => Some(*x),
            _ => None,
        }
    }
    if let (Some(x), Some(y)) = (int(a), int(b)) {
        return Some(x == y);
    }
    if let (Some(x), Some(y)) = (float(a), float(b)) {
        return Some(x == y);
    }
    if std::mem::discriminant(a) != std::mem::discriminant(b) {
        return None; // different type class
    }
    Some(a == b)
}

/// Does a headers binding (its arguments) match a message's headers?
pub fn headers_match(binding_args: &FieldTable, headers: Option<&FieldTable>) -> bool {
    let Some(mode) = HeadersMatch::from_args(binding_args) else {
        return false;
    };
    let with_x = matches!(mode, HeadersMatch::AllWithX | HeadersMatch::AnyWithX);
    let all = matches!(mode, HeadersMatch::All | HeadersMatch::AllWithX);
    let empty = FieldTable::default();
    let headers = headers.unwrap_or(&empty);
    let mut any_matched = false;
    for (k, pv) in binding_args.inner() {
        let key = k.as_str();
        if key == "x-match" || (!with_x && key.starts_with("x-")) {
            continue;
        }
        let matched = match headers.inner().get(key) {
            None => false,
            // A void pattern value asks only for the header's presence.
            Some(_) if matches!(pv, AMQPValue::Void) => true,
            Some(dv) => values_equal(pv, dv).unwrap_or(false),
        };
        if matched {
            any_matched = true;
            if !all {
                return true;
            }
        } else if all {
            return false;
        }
    }
    // "all" with no (counted) binding keys matches everything; "any" with none matches nothing.
    if all { true } else { any_matched }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stablemq_protocol::{LongString, ShortString};

    #[test]
    fn topic_patterns() {
        let cases = [
            ("#", "", true),
            ("#", "a.b.c", true),
            ("*", "a", true),
            ("*", "a.b", false),
            ("*", "", false),
            ("", "", true),
            ("", "a", false),
            ("a.*", "a.b", true),
            ("a.*", "a", false),
            ("a.#", "a", true),
            ("a.#", "a.b.c", true),
            ("a.#.b", "a.b", true),
            ("a.#.b", "a.x.y.b", true),
            ("a.#.b", "a.x.y.c", false),
            ("#.b", "b", true),
            ("#.b", "x.b", true),
            ("*.b.#", "a.b", true),
            ("*.b.#", "b", false),
            ("a..b", "a..b", true),
            ("a.*.b", "a..b", true),
            ("kern.*", "kern.critical", true),
            ("kern.*", "anonymous.info", false),
            ("*.*.rabbit", "quick.orange.rabbit", true),
            ("lazy.#", "lazy.orange.male.rabbit", true),
            ("#.#", "a", true),
            ("a.#.#.b", "a.b", true),
            ("x", "y", false),
        ];
        for (p, k, want) in cases {
            assert_eq!(topic_matches(p, k), want, "pattern {p:?} key {k:?}");
        }
    }

    fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in pairs {
            t.insert(ShortString::from(*k), v.clone());
        }
        t
    }
    fn s(v: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(v))
    }

    #[test]
    fn headers_all_any_and_x_variants() {
        let msg = table(&[("a", s("1")), ("b", AMQPValue::LongInt(2)), ("x-k", s("v"))]);
        let all = table(&[
            ("x-match", s("all")),
            ("a", s("1")),
            ("b", AMQPValue::ShortShortUInt(2)),
        ]);
        assert!(headers_match(&all, Some(&msg)));
        let all_miss = table(&[("a", s("1")), ("c", s("3"))]);
        assert!(!headers_match(&all_miss, Some(&msg)));
        let any = table(&[
            ("x-match", s("any")),
            ("a", s("nope")),
            ("b", AMQPValue::LongLongInt(2)),
        ]);
        assert!(headers_match(&any, Some(&msg)));
        let any_none = table(&[("x-match", s("any")), ("a", s("nope"))]);
        assert!(!headers_match(&any_none, Some(&msg)));
        // x- keys are ignored by all/any but count for the -with-x modes.
        let all_x_ignored = table(&[("x-match", s("all")), ("x-k", s("other"))]);
        assert!(headers_match(&all_x_ignored, Some(&msg)));
        let all_with_x = table(&[("x-match", s("all-with-x")), ("x-k", s("other"))]);
        assert!(!headers_match(&all_with_x, Some(&msg)));
        let any_with_x = table(&[("x-match", s("any-with-x")), ("x-k", s("v"))]);
        assert!(headers_match(&any_with_x, Some(&msg)));
        let void = table(&[("a", AMQPValue::Void)]);
        assert!(headers_match(&void, Some(&msg)));
        assert!(!headers_match(&void, None));
        let bad = table(&[("x-match", s("most"))]);
        assert!(!headers_match(&bad, Some(&msg)));
        assert_eq!(HeadersMatch::from_args(&bad), None);
    }
}
