//! One consumer: one connection, one task. Deliveries are read straight from
//! the read buffer ([`scan_frames`]); the send time in each body's first 8 octets
//! gives the end-to-end latency. Manual-ack consumers ack with `multiple` every
//! N messages. By default the acks decided in one read go out in one write; with
//! `--frames-per-write N`, a write carries at most N of them ([`AckWrites`]), as
//! a client library's `basic_ack` writes each one.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use hdrhistogram::Histogram;
use stablemq_protocol::methods::basic;
use stablemq_protocol::{AMQPClass, FieldTable, Frame, encode_frame};

use super::client::{AmqpUri, Conn, Fast, frame_error, put_heartbeat, scan_frames};
use super::stats::{Flushed, latency_histogram, record_latency};
use super::{Ended, TaskCtx, TaskReport, drive, wait_go};

/// What every consumer of a run does.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// basic.qos prefetch count; 0 = none sent (unlimited).
    pub prefetch: u16,
    /// Consume with no-ack: the broker considers a message acked when it sends it.
    pub auto_ack: bool,
    /// Ack (multiple=true) after this many messages.
    pub multi_ack_every: u64,
    /// Most acks per socket write; `None` = all those one read produced.
    pub frames_per_write: Option<u32>,
}

/// Where each frame set (an ack, a heartbeat) ends in the write buffer, so that
/// a write can stop after at most N of them.
#[derive(Debug)]
pub struct AckWrites {
    per_write: usize,
    /// Buffer offsets just past each queued frame set, oldest first.
    ends: VecDeque<usize>,
}

impl AckWrites {
    /// At most `per_write` frame sets (at least one) per write.
    pub fn new(per_write: u32) -> AckWrites {
        AckWrites {
            per_write: per_write.max(1) as usize,
            ends: VecDeque::new(),
        }
    }

    /// The buffer grew to `len` with one more frame set.
    pub fn pushed(&mut self, len: usize) {
        if self.ends.back().is_none_or(|&e| e < len) {
            self.ends.push_back(len);
        }
    }

    /// Where the next write, starting at `pos`, must stop (≤ `len`).
    pub fn write_end(&mut self, pos: usize, len: usize) -> usize {
        while self.ends.front().is_some_and(|&e| e <= pos) {
            self.ends.pop_front();
        }
        self.ends
            .get(self.per_write - 1)
            .copied()
            .unwrap_or(len)
            .min(len)
    }

    /// The buffer was emptied.
    pub fn clear(&mut self) {
        self.ends.clear();
    }
}

/// basic.ack(multiple=true) on channel 1, with the delivery tag patched in.
#[derive(Debug, Clone)]
pub struct AckTemplate([u8; 21]);

impl AckTemplate {
    /// Where the delivery tag sits: frame header (7) + class and method ids (4).
    const TAG_AT: usize = 11;

    /// The ack frame with tag 0, to patch.
    pub fn new() -> AckTemplate {
        let mut out = BytesMut::new();
        let ack = AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: 0,
            multiple: true,
        }));
        encode_frame(
            &Frame::Method {
                channel: 1,
                method: ack,
            },
            &mut out,
        );
        AckTemplate(out[..].try_into().expect("basic.ack is 21 octets"))
    }

    /// Append the ack of every tag up to `tag` to `out`.
    pub fn append(&self, out: &mut Vec<u8>, tag: u64) {
        let base = out.len();
        out.extend_from_slice(&self.0);
        out[base + Self::TAG_AT..base + Self::TAG_AT + 8].copy_from_slice(&tag.to_be_bytes());
    }
}

impl Default for AckTemplate {
    fn default() -> Self {
        AckTemplate::new()
    }
}

/// Message assembly and acking, apart from the socket.
#[derive(Debug)]
pub struct Receiver {
    auto_ack: bool,
    multi_ack_every: u64,
    ack_tpl: AckTemplate,
    last_tag: u64,
    unacked: u64,
    remaining: u64,
    first_body: bool,
    sent_ns: Option<u64>,
    /// Messages received whole.
    pub consumed: u64,
    /// Clock time (ns) of the last message received whole.
    pub last_consume_ns: u64,
    /// End-to-end latencies, from the send time in each body.
    pub hist: Histogram<u64>,
}

impl Receiver {
    /// A receiver for one consumer with `cfg`'s acking.
    pub fn new(cfg: &ConsumerConfig) -> Receiver {
        Receiver {
            auto_ack: cfg.auto_ack,
            multi_ack_every: cfg.multi_ack_every.max(1),
            ack_tpl: AckTemplate::new(),
            last_tag: 0,
            unacked: 0,
            remaining: 0,
            first_body: false,
            sent_ns: None,
            consumed: 0,
            last_consume_ns: 0,
            hist: latency_histogram(),
        }
    }

    /// One frame from the broker; acks and heartbeats to send go into `out`.
    pub fn on_frame(&mut self, f: Fast<'_>, now_ns: u64, out: &mut Vec<u8>) -> Result<(), String> {
        match f {
            Fast::Deliver { tag } => self.last_tag = tag,
            Fast::Header { body_size } => {
                self.remaining = body_size;
                self.first_body = true;
                self.sent_ns = None;
                if body_size == 0 {
                    self.complete(now_ns, out);
                }
            }
            Fast::Body(payload) => {
                if self.first_body {
                    self.first_body = false;
                    self.sent_ns = payload.first_chunk::<8>().map(|b| u64::from_be_bytes(*b));
                }
                self.remaining = self.remaining.saturating_sub(payload.len() as u64);
                if self.remaining == 0 {
                    self.complete(now_ns, out);
                }
            }
            Fast::Heartbeat => put_heartbeat(out),
            Fast::Other(frame) => {
                if let Some(e) = frame_error(&frame) {
                    return Err(e);
                }
            }
            Fast::Ack { .. } | Fast::Nack { .. } => {}
        }
        Ok(())
    }

    fn complete(&mut self, now_ns: u64, out: &mut Vec<u8>) {
        self.consumed += 1;
        self.last_consume_ns = now_ns;
        if let Some(sent) = self.sent_ns.take() {
            record_latency(&mut self.hist, sent, now_ns);
        }
        if !self.auto_ack {
            self.unacked += 1;
            if self.unacked >= self.multi_ack_every {
                self.ack_all(out);
            }
        }
    }

    /// Ack everything delivered so far (multiple=true), if anything is unacked.
    pub fn ack_all(&mut self, out: &mut Vec<u8>) {
        if self.unacked > 0 {
            self.ack_tpl.append(out, self.last_tag);
            self.unacked = 0;
        }
    }
}

struct Consumer {
    conn: Conn,
    ctx: TaskCtx,
    rx: Receiver,
    wbuf: Vec<u8>,
    wpos: usize,
    /// With `--frames-per-write`: the frame-set boundaries in `wbuf`.
    writes: Option<AckWrites>,
    flushed: Flushed,
}

impl Consumer {
    fn handle_input(&mut self) -> Result<(), String> {
        let mut rbuf = std::mem::take(&mut self.conn.rbuf);
        // One clock reading per read: everything in it arrived together.
        let now = self.ctx.clock.now_ns();
        let (rx, out, writes) = (&mut self.rx, &mut self.wbuf, &mut self.writes);
        let res = scan_frames(&mut rbuf, self.conn.frame_max, |f| {
            let before = out.len();
            let r = rx.on_frame(f, now, out);
            if let Some(w) = writes.as_mut()
                && out.len() > before
            {
                w.pushed(out.len());
            }
            r
        });
        self.conn.rbuf = rbuf;
        res
    }

    /// Write what is left in the buffer, keeping to `--frames-per-write`.
    async fn write_rest(&mut self) -> Result<(), String> {
        while self.wpos < self.wbuf.len() {
            let end = match &mut self.writes {
                Some(w) => w.write_end(self.wpos, self.wbuf.len()),
                None => self.wbuf.len(),
            };
            self.conn.write_all(&self.wbuf[self.wpos..end]).await?;
            self.wpos = end;
        }
        Ok(())
    }

    fn poll_io(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), String>> {
        for _ in 0..64 {
            let mut progress = false;
            match self.conn.poll_fill(cx) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err("the broker closed the connection".into()));
                }
                Poll::Ready(Ok(_)) => {
                    progress = true;
                    if let Err(e) = self.handle_input() {
                        return Poll::Ready(Err(e));
                    }
                    self.flushed
                        .flush(self.rx.consumed, &self.ctx.counters.consumed);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(format!("read: {e}"))),
                Poll::Pending => {}
            }
            if self.wpos < self.wbuf.len() {
                let end = match &mut self.writes {
                    Some(w) => w.write_end(self.wpos, self.wbuf.len()),
                    None => self.wbuf.len(),
                };
                match self.conn.poll_write_some(cx, &self.wbuf[self.wpos..end]) {
                    Poll::Ready(Ok(n)) => {
                        self.wpos += n;
                        progress = true;
                        if self.wpos == self.wbuf.len() {
                            self.wbuf.clear();
                            self.wpos = 0;
                            if let Some(w) = &mut self.writes {
                                w.clear();
                            }
                        }
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(format!("write: {e}"))),
                    Poll::Pending => {}
                }
            }
            if !progress {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Run one consumer: connect, set the prefetch, subscribe to each of `queues`
/// on the one channel, wait for the start, consume until the deadline passes or
/// the run stops.
pub async fn run(
    uri: AmqpUri,
    name: String,
    cfg: Arc<ConsumerConfig>,
    queues: Vec<String>,
    mut ctx: TaskCtx,
) -> Result<TaskReport, String> {
    let mut conn = Conn::open(&uri, &name).await?;
    if cfg.prefetch > 0 {
        let qos = AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: cfg.prefetch,
            global: false,
        }));
        conn.rpc(qos)
            .await
            .map_err(|e| format!("{name}: basic.qos: {e}"))?;
    }
    for q in &queues {
        let consume = AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: q.as_str().into(),
            consumer_tag: "".into(),
            no_local: false,
            no_ack: cfg.auto_ack,
            exclusive: false,
            nowait: false,
            arguments: FieldTable::default(),
        }));
        match conn.rpc(consume).await {
            Ok(AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(_))) => {}
            Ok(m) => return Err(format!("{name}: expected basic.consume-ok, got {m:?}")),
            Err(e) => return Err(format!("{name}: basic.consume {q}: {e}")),
        }
    }
    let _ = ctx.ready.send(()).await;
    let Some(go_ns) = wait_go(&mut ctx.phase).await else {
        conn.close(Duration::from_secs(1)).await;
        return Ok(TaskReport::default());
    };
    let clock = ctx.clock;
    let mut phase = ctx.phase.clone();
    let deadline = ctx.deadline(go_ns);
    let mut c = Consumer {
        conn,
        ctx,
        rx: Receiver::new(&cfg),
        wbuf: Vec::with_capacity(4096),
        wpos: 0,
        writes: cfg.frames_per_write.map(AckWrites::new),
        flushed: Flushed::default(),
    };
    c.rx.last_consume_ns = go_ns;
    let ended = drive(&mut phase, deadline, |cx| c.poll_io(cx))
        .await
        .map_err(|e| format!("{name}: {e}"))?;
    c.flushed.flush(c.rx.consumed, &c.ctx.counters.consumed);
    let consume_end = match ended {
        // Stopped because every expected message arrived: the last one is the end.
        Ended::Stopped { done: true } | Ended::Finished => c.rx.last_consume_ns,
        _ => clock.now_ns(),
    };
    // Leave nothing unacked behind: ack the tail, then close.
    let before = c.wbuf.len();
    c.rx.ack_all(&mut c.wbuf);
    if let Some(w) = c.writes.as_mut()
        && c.wbuf.len() > before
    {
        w.pushed(c.wbuf.len());
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), c.write_rest()).await;
    let report = TaskReport {
        consume_end_ns: Some(consume_end),
        e2e_hist: Some(c.rx.hist),
        ..TaskReport::default()
    };
    c.conn.close(Duration::from_secs(2)).await;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use stablemq_protocol::{BasicProperties, decode_frame, encode_deliver};

    fn cfg(auto_ack: bool, every: u64) -> ConsumerConfig {
        ConsumerConfig {
            prefetch: 0,
            auto_ack,
            multi_ack_every: every,
            frames_per_write: None,
        }
    }

    fn deliveries(n: u64, body: &[u8], frame_max: u32) -> BytesMut {
        let mut wire = BytesMut::new();
        let body = Bytes::copy_from_slice(body);
        for tag in 1..=n {
            let props = BasicProperties::default();
            encode_deliver(
                1,
                "amq.ctag-1",
                tag,
                false,
                "",
                "q",
                &props,
                &body,
                frame_max,
                &mut wire,
            );
        }
        wire
    }

    fn acks(out: &[u8]) -> Vec<(u64, bool)> {
        let mut buf = BytesMut::from(out);
        let mut v = Vec::new();
        while let Some(f) = decode_frame(&mut buf, 0).unwrap() {
            match f {
                Frame::Method {
                    method: AMQPClass::Basic(basic::AMQPMethod::Ack(a)),
                    ..
                } => v.push((a.delivery_tag, a.multiple)),
                other => panic!("{other:?}"),
            }
        }
        v
    }

    #[test]
    fn ack_template_patches_the_tag() {
        let mut out = Vec::new();
        AckTemplate::new().append(&mut out, 0xdead_beef_0042);
        assert_eq!(acks(&out), [(0xdead_beef_0042, true)]);
    }

    #[test]
    fn multiple_acks_every_n_and_latency_from_the_body() {
        let mut body = 1_000_000u64.to_be_bytes().to_vec();
        body.extend_from_slice(&[0; 20_000]); // several body frames at frame_max 4096
        let mut wire = deliveries(7, &body, 4096);
        let mut rx = Receiver::new(&cfg(false, 3));
        let mut out = Vec::new();
        scan_frames(&mut wire, 4096, |f| rx.on_frame(f, 3_000_000, &mut out)).unwrap();
        assert_eq!(rx.consumed, 7);
        assert_eq!(acks(&out), [(3, true), (6, true)]);
        out.clear();
        rx.ack_all(&mut out);
        rx.ack_all(&mut out); // nothing left the second time
        assert_eq!(acks(&out), [(7, true)]);
        assert_eq!(rx.hist.len(), 7);
        assert_eq!(rx.hist.max(), rx.hist.highest_equivalent(2_000)); // 2 ms
    }

    #[test]
    fn auto_ack_never_acks_and_short_bodies_have_no_latency() {
        let mut wire = deliveries(5, b"tiny", 131_072);
        let mut rx = Receiver::new(&cfg(true, 1));
        let mut out = Vec::new();
        scan_frames(&mut wire, 131_072, |f| rx.on_frame(f, 10, &mut out)).unwrap();
        assert_eq!(rx.consumed, 5);
        assert!(out.is_empty());
        assert!(rx.hist.is_empty());
        let mut empty = deliveries(2, b"", 131_072);
        scan_frames(&mut empty, 131_072, |f| rx.on_frame(f, 10, &mut out)).unwrap();
        assert_eq!(rx.consumed, 7);
    }

    #[test]
    fn ack_writes_stop_after_n_frame_sets() {
        let mut w = AckWrites::new(1);
        for end in [21, 42, 63] {
            w.pushed(end);
        }
        w.pushed(63); // nothing new: ignored
        assert_eq!(w.write_end(0, 63), 21);
        assert_eq!(w.write_end(10, 63), 21, "a partial write finishes its ack");
        assert_eq!(w.write_end(21, 63), 42);
        assert_eq!(w.write_end(42, 63), 63);
        w.clear();
        assert_eq!(w.write_end(0, 8), 8, "unmarked bytes go in one write");
        let mut w = AckWrites::new(2);
        for end in [21, 42, 63] {
            w.pushed(end);
        }
        assert_eq!(w.write_end(0, 63), 42);
        assert_eq!(w.write_end(42, 63), 63);
    }
}
