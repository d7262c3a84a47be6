//! The codec and the section layer.

use bytes::Bytes;

use super::{dec, enc};
use crate::amqp10::codec::{MAX_DEPTH, Value};
use crate::amqp10::sections::{self, Body};
use crate::amqp10::{Amqp10Error, to_amqp091};

#[test]
fn decodes_every_primitive_encoding() {
    let cases: Vec<(&[u8], Value<'_>)> = vec![
        (b"\x40", Value::Null),
        (b"\x41", Value::Bool(true)),
        (b"\x42", Value::Bool(false)),
        (b"\x56\x01", Value::Bool(true)),
        (b"\x56\x00", Value::Bool(false)),
        (b"\x50\xc8", Value::Ubyte(200)),
        (b"\x51\xfe", Value::Byte(-2)),
        (b"\x60\xea\x60", Value::Ushort(60000)),
        (b"\x61\xfe\xd4", Value::Short(-300)),
        (b"\x43", Value::Uint(0)),
        (b"\x52\x07", Value::Uint(7)),
        (b"\x70\xee\x6b\x28\x00", Value::Uint(4_000_000_000)),
        (b"\x44", Value::Ulong(0)),
        (b"\x53\x75", Value::Ulong(0x75)),
        (b"\x80\x00\x00\x00\x00\x00\x00\x30\x39", Value::Ulong(12345)),
        (b"\x54\xf9", Value::Int(-7)),
        (b"\x71\xff\xfe\xee\x90", Value::Int(-70000)),
        (b"\x55\x05", Value::Long(5)),
        (
            b"\x81\xff\xff\xff\xfe\xd5\xfa\x0e\x00",
            Value::Long(-5_000_000_000),
        ),
        (b"\x72\x40\x20\x00\x00", Value::Float(2.5)),
        (
            b"\x82\xbf\xd0\x00\x00\x00\x00\x00\x00",
            Value::Double(-0.25),
        ),
        (
            b"\x83\x00\x00\x01\x74\x87\x6e\x80\x00",
            Value::Timestamp(1_600_000_000_000),
        ),
        (
            b"\x98\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f",
            Value::Uuid(*b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"),
        ),
        (b"\xa0\x02\xff\x00", Value::Binary(b"\xff\x00")),
        (b"\xb0\x00\x00\x00\x01x", Value::Binary(b"x")),
        (b"\xa1\x02hi", Value::String(b"hi")),
        (b"\xb1\x00\x00\x00\x02\xff\xfe", Value::String(b"\xff\xfe")),
        (b"\xa3\x03sym", Value::Symbol(b"sym")),
        (b"\xb3\x00\x00\x00\x01s", Value::Symbol(b"s")),
        (b"\x45", Value::List(vec![])),
        (
            b"\xc0\x03\x02\x40\x41",
            Value::List(vec![Value::Null, Value::Bool(true)]),
        ),
        (
            b"\xd0\x00\x00\x00\x05\x00\x00\x00\x01\x43",
            Value::List(vec![Value::Uint(0)]),
        ),
        (
            b"\xc1\x05\x02\xa1\x01k\x40",
            Value::Map(vec![(Value::String(b"k"), Value::Null)]),
        ),
        (b"\xd1\x00\x00\x00\x04\x00\x00\x00\x00", Value::Map(vec![])),
    ];
    for (bytes, want) in cases {
        assert_eq!(dec(bytes).unwrap(), want, "{bytes:02x?}");
    }
}

#[test]
fn keeps_values_nothing_maps_as_their_encoding() {
    let opaque: [&[u8]; 9] = [
        b"\x74\x00\x00\x00\x01",                               // decimal32
        b"\x84\x00\x00\x00\x00\x00\x00\x00\x01",               // decimal64
        &[0x94; 17],                                           // decimal128
        b"\x73\x00\x00\x00\x78",                               // char
        b"\xe0\x05\x03\x50\x01\x02\x03",                       // array8 of ubyte
        b"\xf0\x00\x00\x00\x09\x00\x00\x00\x02\xa1\x01a\x01b", // array32 of str8
        b"\xe0\x02\x00\x40",                                   // empty array of null
        b"\xe0\x07\x01\x00\xa3\x01d\x50\x09",                  // array of described ubyte
        b"\x00\xa3\x03foo\xa1\x03bar",                         // described string
    ];
    for bytes in opaque {
        assert_eq!(dec(bytes).unwrap(), Value::Opaque(bytes), "{bytes:02x?}");
        assert_eq!(enc(&Value::Opaque(bytes)), bytes);
    }
}

#[test]
fn encodes_as_rabbitmq_310_does() {
    let long_str = vec![b'a'; 255];
    let cases: Vec<(Value<'_>, Vec<u8>)> = vec![
        (Value::Bool(true), vec![0x56, 1]),
        (Value::Uint(0), vec![0x43]),
        (Value::Uint(255), vec![0x52, 255]),
        (Value::Uint(256), vec![0x70, 0, 0, 1, 0]),
        (Value::Ulong(0), vec![0x44]),
        (Value::Ulong(255), vec![0x53, 255]),
        (Value::Ulong(256), vec![0x80, 0, 0, 0, 0, 0, 0, 1, 0]),
        (Value::Int(127), vec![0x54, 127]),
        (Value::Int(-128), vec![0x54, 0x80]),
        (Value::Int(128), vec![0x71, 0, 0, 0, 128]),
        (
            Value::Long(-129),
            vec![0x81, 255, 255, 255, 255, 255, 255, 255, 0x7f],
        ),
        (Value::Long(-1), vec![0x55, 0xff]),
        (
            Value::String(&long_str[..254]),
            [&[0xa1, 254][..], &long_str[..254]].concat(),
        ),
        (
            Value::String(&long_str),
            [&[0xb1, 0, 0, 0, 255][..], &long_str].concat(),
        ),
        (
            Value::Binary(&long_str),
            [&[0xb0, 0, 0, 0, 255][..], &long_str].concat(),
        ),
        (
            Value::Symbol(&long_str),
            [&[0xa3, 255][..], &long_str].concat(),
        ),
        (Value::List(vec![]), vec![0x45]),
        (Value::Map(vec![]), vec![0xc1, 1, 0]),
        (
            Value::List(vec![Value::Null; 254]),
            [&[0xc0, 255, 254][..], &[0x40; 254]].concat(),
        ),
        (
            Value::List(vec![Value::Null; 255]),
            [&[0xd0, 0, 0, 1, 3, 0, 0, 0, 255][..], &[0x40; 255]].concat(),
        ),
        (Value::List(vec![Value::String(&long_str[..252])]), {
            [&[0xc0, 255, 1, 0xa1, 252][..], &long_str[..252]].concat()
        }),
        (Value::List(vec![Value::String(&long_str[..253])]), {
            [
                &[0xd0, 0, 0, 1, 3, 0, 0, 0, 1, 0xa1, 253][..],
                &long_str[..253],
            ]
            .concat()
        }),
    ];
    for (value, want) in cases {
        assert_eq!(enc(&value), want, "{value:?}");
        assert_eq!(dec(&want).unwrap(), value);
    }
}

#[test]
fn malformed_values_are_errors() {
    let cases: [(&[u8], Amqp10Error); 10] = [
        (b"", Amqp10Error::Truncated { offset: 0 }),
        (b"\x70\x00\x00", Amqp10Error::Truncated { offset: 1 }),
        (b"\xa1\x05abc", Amqp10Error::Truncated { offset: 2 }),
        (
            b"\xb0\xff\xff\xff\xff",
            Amqp10Error::Truncated { offset: 5 },
        ),
        (b"\x56\x02", Amqp10Error::BadBoolean { offset: 0 }),
        (
            b"\x99",
            Amqp10Error::UnknownFormatCode {
                code: 0x99,
                offset: 0,
            },
        ),
        (
            b"\xc0\x02\x05\x40",
            Amqp10Error::BadCompound {
                offset: 0,
                reason: "count exceeds size",
            },
        ),
        (
            b"\xc0\x03\x01\x40\x40",
            Amqp10Error::BadCompound {
                offset: 0,
                reason: "size exceeds its elements",
            },
        ),
        (
            b"\xc1\x02\x01\x40",
            Amqp10Error::BadCompound {
                offset: 0,
                reason: "odd map count",
            },
        ),
        (
            b"\xd0\x00\x00\x00\x08\xff\xff\xff\xff\x40\x40\x40\x40",
            Amqp10Error::BadCompound {
                offset: 0,
                reason: "count exceeds size",
            },
        ),
    ];
    for (bytes, want) in cases {
        assert_eq!(dec(bytes), Err(want), "{bytes:02x?}");
    }
    // An element running past its list's size, and an array whose elements do.
    assert_eq!(
        dec(b"\xc0\x02\x01\xa1\x05abcde"),
        Err(Amqp10Error::Truncated { offset: 4 })
    );
    assert!(dec(b"\xe0\x03\x02\x50\x01").is_err());
    assert!(
        dec(b"\xe0\x04\x01\x00\x53\x00").is_err(),
        "doubly described array constructor"
    );
}

/// `n` list32s nested in each other around a null.
fn nested(n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 * n + 1);
    for level in 0..n {
        let inner = 9 * (n - 1 - level) + 1;
        out.push(0xd0);
        out.extend_from_slice(&u32::try_from(inner + 4).unwrap().to_be_bytes());
        out.extend_from_slice(&1u32.to_be_bytes());
    }
    out.push(0x40);
    out
}

#[test]
fn nesting_is_bounded_without_exhausting_the_stack() {
    assert!(dec(&nested(MAX_DEPTH)).is_ok());
    assert!(matches!(
        dec(&nested(MAX_DEPTH + 1)),
        Err(Amqp10Error::TooDeep { .. })
    ));
    let described = [&[0x00, 0x53, 0x01][..]].repeat(MAX_DEPTH + 1).concat();
    assert!(matches!(
        dec(&[&described[..], b"\x40"].concat()),
        Err(Amqp10Error::TooDeep { .. })
    ));
    // 100 000 levels (900 KB) on a 256 KiB stack: refused, not a stack overflow.
    let deep = [&b"\x00\x53\x77"[..], &nested(100_000)].concat();
    let result = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || to_amqp091(&Bytes::from(deep)).map(|_| ()))
        .unwrap()
        .join()
        .unwrap();
    assert!(matches!(result, Err(Amqp10Error::TooDeep { .. })));
}

#[test]
fn sections_are_recognised_by_code_and_by_name() {
    let named = [
        &b"\x00\xa3\x10amqp:data:binary\xa0\x02hi"[..],
        b"\x00\x80\0\0\0\0\0\0\0\x75\xa0\x01!",
    ]
    .concat();
    let parsed = sections::parse(&named).unwrap();
    assert_eq!(
        parsed.body,
        Body::Data(named.len() - 1..named.len()),
        "the last data section wins"
    );
    let bad: [(&[u8], Amqp10Error); 6] = [
        (b"\x40", Amqp10Error::NotASection { offset: 0 }),
        (
            b"\x00\x53\x79\x40",
            Amqp10Error::UnknownSection { offset: 0 },
        ),
        (
            b"\x00\xa3\x03foo\x40",
            Amqp10Error::UnknownSection { offset: 0 },
        ),
        (
            b"\x00\x53\x73\xc1\x01\x00",
            Amqp10Error::BadSection {
                code: 0x73,
                offset: 0,
            },
        ),
        (
            b"\x00\x53\x75\xa1\x01x",
            Amqp10Error::BadSection {
                code: 0x75,
                offset: 0,
            },
        ),
        (
            b"\x00\x53\x74\x45",
            Amqp10Error::BadSection {
                code: 0x74,
                offset: 0,
            },
        ),
    ];
    for (bytes, want) in bad {
        assert_eq!(sections::parse(bytes).err(), Some(want), "{bytes:02x?}");
    }
}

#[test]
fn body_sections_must_be_of_one_kind() {
    let value = b"\x00\x53\x77\x40";
    let seq = b"\x00\x53\x76\x45";
    let data = b"\x00\x53\x75\xa0\x00";
    let footer = b"\x00\x53\x78\xc1\x01\x00";
    for bad in [
        [&value[..], value].concat(),
        [&data[..], value].concat(),
        [&seq[..], data].concat(),
        [&value[..], seq].concat(),
        [&seq[..], footer, seq].concat(),
    ] {
        assert!(
            matches!(sections::parse(&bad), Err(Amqp10Error::MixedBody { .. })),
            "{bad:02x?}"
        );
    }
    let two = [&seq[..], seq, footer].concat();
    assert_eq!(sections::parse(&two).unwrap().body, Body::Sequence(0..8));
}
