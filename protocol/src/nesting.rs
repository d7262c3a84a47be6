//! A guard against field tables nested deep enough to overflow the stack.
//!
//! amq-protocol parses (and later encodes and drops) field tables and arrays
//! recursively, several stack frames per level. Each level costs a peer only 5 or 6
//! octets, so a single 128 KiB frame could nest ~20 000 levels and abort the broker
//! with a stack overflow. Before a payload reaches amq-protocol we walk its tables
//! with a depth-bounded walker that allocates nothing.
//!
//! The walker only answers "too deep or not". On anything malformed it stops and
//! says "not too deep": amq-protocol will reject the payload, and it cannot recurse
//! further than the well-formed prefix the walker has already checked, because both
//! read the same octets in the same order.

/// Deepest nesting of field tables and arrays accepted, counting the outermost
/// table as 1. Real clients use a handful (a message's `x-death` header reaches 4).
/// Decoding costs about 10 KiB of stack per level in debug builds and 1.5 KiB in
/// release, so 32 levels stay under 0.5 MiB even in debug: well inside tokio's
/// 2 MiB worker stacks.
pub const MAX_TABLE_DEPTH: usize = 32;

/// Why the walk stopped early.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    TooDeep,
    /// Truncated or unknown type: leave the verdict to the real parser.
    Malformed,
}

/// The argument shapes that precede a field table in the methods that carry one.
#[derive(Clone, Copy)]
enum Arg {
    Octet,
    Short,
    ShortStr,
    Table,
}

/// Argument layouts (after class and method id) up to and including the table,
/// from the AMQP 0-9-1 spec as amq-protocol implements it. Methods not listed
/// carry no table. Tests check every listed layout against amq-protocol.
fn table_layout(class_id: u16, method_id: u16) -> Option<&'static [Arg]> {
    use Arg::*;
    Some(match (class_id, method_id) {
        // connection.start: version-major, version-minor, server-properties
        (10, 10) => &[Octet, Octet, Table],
        // connection.start-ok: client-properties
        (10, 11) => &[Table],
        // exchange.declare: ticket, exchange, type, bits, arguments
        (40, 10) => &[Short, ShortStr, ShortStr, Octet, Table],
        // exchange.bind / exchange.unbind: ticket, destination, source, routing-key, bits, arguments
        (40, 30) | (40, 40) => &[Short, ShortStr, ShortStr, ShortStr, Octet, Table],
        // queue.declare: ticket, queue, bits, arguments
        (50, 10) => &[Short, ShortStr, Octet, Table],
        // queue.bind: ticket, queue, exchange, routing-key, bits, arguments
        (50, 20) => &[Short, ShortStr, ShortStr, ShortStr, Octet, Table],
        // queue.unbind: ticket, queue, exchange, routing-key, arguments (no bits)
        (50, 50) => &[Short, ShortStr, ShortStr, ShortStr, Table],
        // basic.consume: ticket, queue, consumer-tag, bits, arguments
        (60, 20) => &[Short, ShortStr, ShortStr, Octet, Table],
        _ => return None,
    })
}

/// False if the arguments of method `class_id.method_id` nest tables deeper than
/// [`MAX_TABLE_DEPTH`].
pub(crate) fn method_args_ok(class_id: u16, method_id: u16, args: &[u8]) -> bool {
    let Some(layout) = table_layout(class_id, method_id) else {
        return true;
    };
    let mut rest = args;
    for arg in layout {
        let step = match arg {
            Arg::Octet => skip(rest, 1),
            Arg::Short => skip(rest, 2),
            Arg::ShortStr => skip_short_str(rest),
            Arg::Table => skip_table(rest, 1),
        };
        match step {
            Ok(r) => rest = r,
            Err(stop) => return stop != Stop::TooDeep,
        }
    }
    true
}

/// False if the basic-class property list nests its `headers` table too deeply.
pub(crate) fn properties_ok(props: &[u8]) -> bool {
    let Some((flags, rest)) = props.split_first_chunk::<2>() else {
        return true;
    };
    let flags = u16::from_be_bytes(*flags);
    let mut rest = rest;
    // content-type and content-encoding (bits 15, 14) precede headers (bit 13).
    for bit in [15, 14] {
        if flags & (1 << bit) != 0 {
            match skip_short_str(rest) {
                Ok(r) => rest = r,
                Err(_) => return true,
            }
        }
    }
    if flags & (1 << 13) == 0 {
        return true;
    }
    skip_table(rest, 1) != Err(Stop::TooDeep)
}

fn skip(buf: &[u8], n: usize) -> Result<&[u8], Stop> {
    buf.get(n..).ok_or(Stop::Malformed)
}

fn skip_short_str(buf: &[u8]) -> Result<&[u8], Stop> {
    let (&len, rest) = buf.split_first().ok_or(Stop::Malformed)?;
    skip(rest, usize::from(len))
}

/// Splits off a 32-bit length-prefixed block: (block, rest).
fn long_block(buf: &[u8]) -> Result<(&[u8], &[u8]), Stop> {
    let (len, rest) = buf.split_first_chunk::<4>().ok_or(Stop::Malformed)?;
    let len = usize::try_from(u32::from_be_bytes(*len)).map_err(|_| Stop::Malformed)?;
    if rest.len() < len {
        return Err(Stop::Malformed);
    }
    Ok(rest.split_at(len))
}

/// Skips a field table that sits at nesting level `depth`.
fn skip_table(buf: &[u8], depth: usize) -> Result<&[u8], Stop> {
    if depth > MAX_TABLE_DEPTH {
        return Err(Stop::TooDeep);
    }
    let (mut body, rest) = long_block(buf)?;
    while !body.is_empty() {
        body = skip_short_str(body)?;
        let (&kind, value) = body.split_first().ok_or(Stop::Malformed)?;
        body = skip_value(kind, value, depth)?;
    }
    Ok(rest)
}

/// Skips a field array that sits at nesting level `depth`.
fn skip_array(buf: &[u8], depth: usize) -> Result<&[u8], Stop> {
    if depth > MAX_TABLE_DEPTH {
        return Err(Stop::TooDeep);
    }
    let (mut body, rest) = long_block(buf)?;
    while let Some((&kind, value)) = body.split_first() {
        body = skip_value(kind, value, depth)?;
    }
    Ok(rest)
}

/// Skips one value of type tag `kind` found inside a container at level `depth`.
/// Tags are the ones amq-protocol accepts (`AMQPType::from_id`), which are
/// RabbitMQ's.
fn skip_value(kind: u8, buf: &[u8], depth: usize) -> Result<&[u8], Stop> {
    match kind {
        b'V' => Ok(buf),
        b't' | b'b' | b'B' => skip(buf, 1),
        b's' | b'U' | b'u' => skip(buf, 2),
        b'I' | b'i' | b'f' => skip(buf, 4),
        b'D' => skip(buf, 5),
        b'L' | b'l' | b'd' | b'T' => skip(buf, 8),
        b'S' | b'x' => long_block(buf).map(|(_, rest)| rest),
        b'F' => skip_table(buf, depth + 1),
        b'A' => skip_array(buf, depth + 1),
        _ => Err(Stop::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field value (tag + contents) made of `levels` nested tables or arrays.
    fn nested_value(levels: usize, use_arrays: bool) -> Vec<u8> {
        let mut body = Vec::new();
        if levels > 1 {
            if !use_arrays {
                body.extend_from_slice(&[1, b'k']);
            }
            body.extend(nested_value(levels - 1, use_arrays));
        }
        let mut value = vec![if use_arrays { b'A' } else { b'F' }];
        value.extend_from_slice(&(body.len() as u32).to_be_bytes());
        value.extend(body);
        value
    }

    /// A table holding one entry "k" that nests `levels` more tables or arrays.
    fn nested_table(levels: usize, use_arrays: bool) -> Vec<u8> {
        let mut body = vec![1, b'k'];
        body.extend(nested_value(levels, use_arrays));
        let mut table = (body.len() as u32).to_be_bytes().to_vec();
        table.extend(body);
        table
    }

    #[test]
    fn depth_limit_is_exact_for_tables_and_arrays() {
        for arrays in [false, true] {
            // 1 outer table + (MAX - 1) nested levels = MAX: accepted.
            let ok = nested_table(MAX_TABLE_DEPTH - 1, arrays);
            assert_eq!(skip_table(&ok, 1), Ok(&[][..]), "arrays={arrays}");
            let deep = nested_table(MAX_TABLE_DEPTH, arrays);
            assert_eq!(skip_table(&deep, 1), Err(Stop::TooDeep), "arrays={arrays}");
        }
    }

    #[test]
    fn malformed_input_is_left_to_the_parser() {
        assert!(method_args_ok(50, 10, &[]));
        assert!(method_args_ok(50, 10, &[0, 0, 200]));
        assert!(properties_ok(&[0x20]));
        assert!(properties_ok(&[0x20, 0, 0, 0, 0, 9, 1]));
    }

    #[test]
    fn unknown_type_tag_stops_the_walk() {
        // {"k": <type 'Z'>}: amq-protocol rejects 'Z', so the walk must not guess.
        let table = [0, 0, 0, 3, 1, b'k', b'Z'];
        assert_eq!(skip_table(&table, 1), Err(Stop::Malformed));
    }
}
