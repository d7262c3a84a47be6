//! Entry points for the coverage-guided fuzzer (`fuzz/`, `scripts/fuzz.sh`)
//! and for the corpus replay tests (`tests/fuzz_corpus.rs`): the same
//! function runs under afl and under `cargo test`, so every input the
//! fuzzer keeps, and every crash it found, is replayed by the test command.
//!
//! Not an API: hidden from the docs, and free to change with the targets.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use stablemq_protocol::methods::channel as mch;
use stablemq_protocol::{
    AMQPClass, Decoder, Frame, HeaderCheck, check_protocol_header, encode_frame,
};

use crate::amqp::connection::{Action, Connection};
use crate::amqp::encode::Encoder;
use crate::config::Config;
use crate::master::inout::{Input, ToConn};

pub use crate::management::fuzz::{definitions, management_bodies};

/// Frames one input may drive the machine with, at most.
const MAX_FRAMES: usize = 2048;

/// Drives a [`Connection`] with `data` as the bytes a client sends, the way
/// the connection task does (header check, then frames through one
/// [`Decoder`] with the machine's `decode_limit`), with a master that
/// accepts every open and answers channel.open and channel.close. Checks
/// that nothing panics and that every frame the machine writes encodes.
///
/// The first octet is the clock: each frame advances it by that many
/// hundred milliseconds (0: a frozen clock), and the machine is ticked
/// after each read, so heartbeats and timeouts run too.
pub fn connection(data: &[u8]) {
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    let mut now = Instant::now();
    let step = Duration::from_millis(u64::from(step) * 100);
    let config = Arc::new(Config::default());
    let mut conn = Connection::new(1, [127, 0, 0, 1].into(), config, now);
    let mut rbuf = BytesMut::from(stream);
    let mut decoder = Decoder::default();
    let mut enc = Encoder::default();
    let mut wbuf = BytesMut::new();
    let mut actions = Vec::new();

    let check = check_protocol_header(&rbuf[..rbuf.len().min(8)]);
    conn.on_header(check, now, &mut actions);
    if check != HeaderCheck::Ok {
        run(&mut conn, &mut actions, &mut enc, &mut wbuf);
        return;
    }
    let _ = rbuf.split_to(8);
    for _ in 0..MAX_FRAMES {
        if conn.is_closed() {
            break;
        }
        match decoder.decode(&mut rbuf, conn.decode_limit()) {
            Ok(Some(frame)) => conn.on_frame(frame, now, &mut actions),
            Ok(None) => break,
            Err(e) => {
                conn.on_decode_error(&e, &mut actions);
                rbuf.clear();
            }
        }
        run(&mut conn, &mut actions, &mut enc, &mut wbuf);
        now += step;
        conn.on_tick(now, &mut actions);
        run(&mut conn, &mut actions, &mut enc, &mut wbuf);
    }
    conn.on_eof(&mut actions);
    run(&mut conn, &mut actions, &mut enc, &mut wbuf);
}

/// Carries out `actions` as the connection task and a minimal master would,
/// until none are left.
fn run(conn: &mut Connection, actions: &mut Vec<Action>, enc: &mut Encoder, wbuf: &mut BytesMut) {
    // Answers feed back into the machine, which may answer again: bounded.
    for _ in 0..64 {
        if actions.is_empty() {
            return;
        }
        let frame_max = conn.frame_max();
        let mut answers = Vec::new();
        for a in actions.drain(..) {
            match a {
                Action::Write(f) => {
                    enc.flush(wbuf);
                    written(&f, wbuf);
                }
                Action::WriteRaw(b) => wbuf.extend_from_slice(&b),
                Action::Out(m) => enc.push(m, frame_max, wbuf),
                Action::ToMaster(i) => answers.extend(master_answer(i)),
                Action::Close => {}
            }
        }
        enc.flush(wbuf);
        wbuf.clear();
        for m in answers {
            conn.on_master(m, actions);
        }
    }
}

/// Encodes a frame the machine writes, and checks that it decodes back: a
/// frame that does not would break the client's connection.
fn written(f: &Frame, wbuf: &mut BytesMut) {
    wbuf.extend_from_slice(&check_encodes(f));
}

/// A frame's encoding, checked to decode back whole.
pub(crate) fn check_encodes(f: &Frame) -> BytesMut {
    let mut one = BytesMut::new();
    encode_frame(f, &mut one);
    let bytes = one.clone();
    match stablemq_protocol::decode_frame(&mut one, 0) {
        Ok(Some(_)) if one.is_empty() => {}
        other => panic!("the broker wrote {f:?} as {bytes:?}, which decodes as {other:?}"),
    }
    bytes
}

/// What a master that allows everything answers.
fn master_answer(input: Input) -> Option<ToConn> {
    match input {
        Input::Open { .. } => Some(ToConn::Opened),
        Input::ChannelOpen { ch, .. } => Some(ToConn::Method(
            ch,
            AMQPClass::Channel(mch::AMQPMethod::OpenOk(mch::OpenOk {})),
        )),
        Input::ChannelClose { ch, .. } => Some(ToConn::Method(
            ch,
            AMQPClass::Channel(mch::AMQPMethod::CloseOk(mch::CloseOk {})),
        )),
        _ => None,
    }
}
