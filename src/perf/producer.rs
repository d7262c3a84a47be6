//! One producer: one connection, one task. Publish frames are encoded once
//! ([`Template`]) and copied into a write buffer many at a time, with each
//! message's send time patched into the first 8 octets of its body. Confirms are
//! tracked in a ring of send times indexed by sequence number, at most the
//! confirm window (`-c`) outstanding.
//!
//! A write carries about 64 KiB of publishes, or with `--frames-per-write N` at
//! most N: the buffer is refilled only once the socket took all of it, so a
//! publish never shares a write with more than N-1 others (with N = 1, each
//! publish is its own write, as a client library's `basic_publish` is). The
//! socket is read between writes, so confirms are taken as they come.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use stablemq_protocol::methods::{basic, confirm};
use stablemq_protocol::{AMQPClass, BasicProperties, encode_content};
use tokio::time::Sleep;

use super::client::{AmqpUri, Conn, Fast, frame_error, put_heartbeat, scan_frames};
use super::stats::{Flushed, latency_histogram, record_latency};
use super::{Ended, TaskCtx, TaskReport, drive, wait_go};

/// Aim for about this many octets per socket write (the default batching).
pub const WRITE_BATCH_BYTES: usize = 64 * 1024;
/// Marks a ring slot whose publish is confirmed (or nacked).
const DONE: u64 = u64::MAX;

/// What every producer of a run does.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Bytes per message body.
    pub body_size: usize,
    /// Publish with delivery mode 2.
    pub persistent: bool,
    /// Most unconfirmed publishes; 0 = no confirm mode.
    pub confirm_window: u32,
    /// Messages this producer publishes; `None` = until stopped.
    pub count: Option<u64>,
    /// Messages per second for this producer; `None` = as fast as possible.
    pub rate: Option<f64>,
    /// Most publishes per socket write; `None` = about [`WRITE_BATCH_BYTES`].
    pub frames_per_write: Option<u32>,
}

/// Publishes per write: `--frames-per-write`, or as many of `wire_len` octets
/// as fit in [`WRITE_BATCH_BYTES`] (at least one).
pub fn batch_max(frames_per_write: Option<u32>, wire_len: usize) -> u64 {
    match frames_per_write {
        Some(n) => u64::from(n.max(1)),
        None => (WRITE_BATCH_BYTES / wire_len.max(1)).max(1) as u64,
    }
}

/// basic.publish + header + body of one message, encoded once.
#[derive(Debug, Clone)]
pub struct Template {
    bytes: Vec<u8>,
    /// Where the body's first octet is, when the body can hold a timestamp.
    ts_offset: Option<usize>,
}

impl Template {
    /// A message of `body_size` zero octets to the default exchange with routing
    /// key `queue`, delivery mode 2 if `persistent` (else 1), split into body
    /// frames for `frame_max`.
    pub fn new(queue: &str, body_size: usize, persistent: bool, frame_max: u32) -> Template {
        let method = AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: "".into(),
            routing_key: queue.into(),
            mandatory: false,
            immediate: false,
        }));
        let props = BasicProperties::default().with_delivery_mode(if persistent { 2 } else { 1 });
        let body = Bytes::from(vec![0u8; body_size]);
        let mut out = BytesMut::new();
        encode_content(1, &method, &props, &body, frame_max, &mut out);
        let frame_len = |at: usize| {
            8 + u32::from_be_bytes([out[at + 3], out[at + 4], out[at + 5], out[at + 6]]) as usize
        };
        let method_len = frame_len(0);
        let header_len = frame_len(method_len);
        Template {
            ts_offset: (body_size >= 8).then_some(method_len + header_len + 7),
            bytes: out.to_vec(),
        }
    }

    /// Octets of one message on the wire.
    pub fn wire_len(&self) -> usize {
        self.bytes.len()
    }

    /// Append one message whose body starts with `sent_ns` (big-endian).
    pub fn append(&self, out: &mut Vec<u8>, sent_ns: u64) {
        let base = out.len();
        out.extend_from_slice(&self.bytes);
        if let Some(at) = self.ts_offset {
            out[base + at..base + at + 8].copy_from_slice(&sent_ns.to_be_bytes());
        }
    }
}

/// Publisher-confirm bookkeeping: send times of the unconfirmed window.
#[derive(Debug)]
pub struct Confirms {
    ring: Vec<u64>,
    mask: u64,
    /// Every sequence number up to this one is confirmed or nacked.
    pub done_upto: u64,
    /// Publishes the broker acked.
    pub confirmed: u64,
    /// Publishes the broker nacked.
    pub nacked: u64,
    /// Confirm latencies.
    pub hist: Histogram<u64>,
}

impl Confirms {
    /// Bookkeeping for at most `window` unconfirmed publishes.
    pub fn new(window: u32) -> Confirms {
        let cap = u64::from(window.max(1)).next_power_of_two();
        Confirms {
            ring: vec![DONE; cap as usize],
            mask: cap - 1,
            done_upto: 0,
            confirmed: 0,
            nacked: 0,
            hist: latency_histogram(),
        }
    }

    /// Note that message `seq` (1-based) was sent at `sent_ns`.
    pub fn sent(&mut self, seq: u64, sent_ns: u64) {
        debug_assert!(seq - self.done_upto <= self.mask + 1, "window overrun");
        self.ring[(seq & self.mask) as usize] = sent_ns;
    }

    /// A basic.ack (or nack) for `tag`, `published` being the highest sequence
    /// number sent. Confirmed publishes are recorded in the latency histogram.
    pub fn on_ack(&mut self, tag: u64, multiple: bool, nack: bool, published: u64, now_ns: u64) {
        let tag = tag.min(published);
        let first = if multiple {
            self.done_upto + 1
        } else {
            tag.max(self.done_upto + 1)
        };
        for seq in first..=tag {
            let slot = &mut self.ring[(seq & self.mask) as usize];
            if *slot != DONE {
                if nack {
                    self.nacked += 1;
                } else {
                    self.confirmed += 1;
                    record_latency(&mut self.hist, *slot, now_ns);
                }
                *slot = DONE;
            }
        }
        while self.done_upto < published
            && self.ring[((self.done_upto + 1) & self.mask) as usize] == DONE
        {
            self.done_upto += 1;
        }
    }
}

struct Producer {
    conn: Conn,
    cfg: Arc<ProducerConfig>,
    ctx: TaskCtx,
    /// One template per queue of this producer, used round-robin.
    tpls: Vec<Template>,
    next_tpl: usize,
    go_ns: u64,
    wbuf: Vec<u8>,
    wpos: usize,
    batch_max: u64,
    published: u64,
    confirms: Option<Confirms>,
    timer: Pin<Box<Sleep>>,
    last_publish_ns: u64,
    last_confirm_ns: u64,
    flushed: [Flushed; 3],
}

impl Producer {
    /// How many messages may go now; arms the rate timer when none is due.
    fn sendable(&mut self, cx: &mut Context<'_>, now_ns: u64) -> u64 {
        let mut n = self.batch_max;
        if let Some(limit) = self.cfg.count {
            n = n.min(limit - self.published);
        }
        if let Some(c) = &self.confirms {
            n = n.min(u64::from(self.cfg.confirm_window) - (self.published - c.done_upto));
        }
        if n == 0 {
            return 0;
        }
        if let Some(rate) = self.cfg.rate {
            let due = ((now_ns - self.go_ns) as f64 * rate / 1e9) as u64 + 1;
            if due <= self.published {
                let next = self.intended_ns(self.published + 1, rate);
                self.timer.as_mut().reset(self.ctx.clock.at(next).into());
                if self.timer.as_mut().poll(cx).is_ready() {
                    cx.waker().wake_by_ref();
                }
                return 0;
            }
            n = n.min(due - self.published);
        }
        n
    }

    /// When message `seq` should go out at `rate` messages per second.
    fn intended_ns(&self, seq: u64, rate: f64) -> u64 {
        self.go_ns + ((seq - 1) as f64 * 1e9 / rate) as u64
    }

    /// Encode the next batch into the (empty) write buffer. False if none goes now.
    fn fill(&mut self, cx: &mut Context<'_>) -> bool {
        let now = self.ctx.clock.now_ns();
        let n = self.sendable(cx, now);
        for _ in 0..n {
            self.published += 1;
            let sent = match self.cfg.rate {
                // Coordinated omission: latency counts from when the message
                // should have gone, not from when a full window let it go.
                Some(rate) => self.intended_ns(self.published, rate),
                None => now,
            };
            self.tpls[self.next_tpl].append(&mut self.wbuf, sent);
            self.next_tpl += 1;
            if self.next_tpl == self.tpls.len() {
                self.next_tpl = 0;
            }
            if let Some(c) = &mut self.confirms {
                c.sent(self.published, sent);
            }
        }
        if n > 0 {
            self.last_publish_ns = now;
        }
        n > 0
    }

    fn handle_input(&mut self) -> Result<(), String> {
        let mut rbuf = std::mem::take(&mut self.conn.rbuf);
        let now = self.ctx.clock.now_ns();
        let published = self.published;
        let mut acked = false;
        let res = scan_frames(&mut rbuf, self.conn.frame_max, |f| {
            match f {
                Fast::Ack { tag, multiple } | Fast::Nack { tag, multiple } => {
                    let nack = matches!(f, Fast::Nack { .. });
                    let c = self
                        .confirms
                        .as_mut()
                        .ok_or("unexpected basic.ack from the broker")?;
                    c.on_ack(tag, multiple, nack, published, now);
                    acked = true;
                }
                Fast::Heartbeat => put_heartbeat(&mut self.wbuf),
                Fast::Other(frame) => {
                    if let Some(e) = frame_error(&frame) {
                        return Err(e);
                    }
                }
                _ => {}
            }
            Ok(())
        });
        self.conn.rbuf = rbuf;
        if acked {
            self.last_confirm_ns = now;
        }
        res
    }

    fn finished(&self) -> bool {
        self.cfg.count == Some(self.published)
            && self.wpos == self.wbuf.len()
            && self
                .confirms
                .as_ref()
                .is_none_or(|c| c.done_upto == self.published)
    }

    fn flush_counters(&mut self) {
        let k = &self.ctx.counters;
        self.flushed[0].flush(self.published, &k.published);
        if let Some(c) = &self.confirms {
            self.flushed[1].flush(c.confirmed, &k.confirmed);
            self.flushed[2].flush(c.nacked, &k.nacked);
        }
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
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(format!("read: {e}"))),
                Poll::Pending => {}
            }
            if self.wpos == self.wbuf.len() {
                self.wbuf.clear();
                self.wpos = 0;
                progress |= self.fill(cx);
            }
            if self.wpos < self.wbuf.len() {
                match self.conn.poll_write_some(cx, &self.wbuf[self.wpos..]) {
                    Poll::Ready(Ok(n)) => {
                        self.wpos += n;
                        progress = true;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(format!("write: {e}"))),
                    Poll::Pending => {}
                }
            }
            self.flush_counters();
            if self.finished() {
                return Poll::Ready(Ok(()));
            }
            if !progress {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Run one producer: connect, enable confirms, wait for the start, publish
/// (round-robin over `queues`) until the count is reached (and confirmed), the
/// deadline passes or the run stops.
pub async fn run(
    uri: AmqpUri,
    name: String,
    cfg: Arc<ProducerConfig>,
    queues: Vec<String>,
    mut ctx: TaskCtx,
) -> Result<TaskReport, String> {
    if queues.is_empty() {
        return Err(format!("{name}: no queue to publish to"));
    }
    let mut conn = Conn::open(&uri, &name).await?;
    if cfg.confirm_window > 0 {
        let select = AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select {
            nowait: false,
        }));
        conn.rpc(select)
            .await
            .map_err(|e| format!("{name}: confirm.select: {e}"))?;
    }
    let tpls: Vec<Template> = queues
        .iter()
        .map(|q| Template::new(q, cfg.body_size, cfg.persistent, conn.frame_max))
        .collect();
    let _ = ctx.ready.send(()).await;
    let Some(go_ns) = wait_go(&mut ctx.phase).await else {
        conn.close(Duration::from_secs(1)).await;
        return Ok(TaskReport::default());
    };
    let wire_len = tpls.iter().map(Template::wire_len).max().unwrap_or(1);
    let batch_max = batch_max(cfg.frames_per_write, wire_len);
    let clock = ctx.clock;
    let mut phase = ctx.phase.clone();
    let deadline = ctx.deadline(go_ns);
    let mut p = Producer {
        conn,
        confirms: (cfg.confirm_window > 0).then(|| Confirms::new(cfg.confirm_window)),
        cfg,
        ctx,
        tpls,
        next_tpl: 0,
        go_ns,
        wbuf: Vec::with_capacity(WRITE_BATCH_BYTES * 2),
        wpos: 0,
        batch_max,
        published: 0,
        timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
        last_publish_ns: go_ns,
        last_confirm_ns: go_ns,
        flushed: Default::default(),
    };
    let ended = drive(&mut phase, deadline, |cx| p.poll_io(cx))
        .await
        .map_err(|e| format!("{name}: {e}"))?;
    let now = clock.now_ns();
    let (publish_end, confirm_end) = match ended {
        Ended::Finished => (p.last_publish_ns, p.last_confirm_ns),
        _ => (now, now),
    };
    p.flush_counters();
    let report = TaskReport {
        publish_end_ns: Some(publish_end),
        confirm_end_ns: p.confirms.is_some().then_some(confirm_end),
        confirm_hist: p.confirms.map(|c| c.hist),
        ..TaskReport::default()
    };
    p.conn.close(Duration::from_secs(2)).await;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stablemq_protocol::{Frame, decode_frame};

    fn frames(wire: &[u8]) -> Vec<Frame> {
        let mut buf = BytesMut::from(wire);
        let mut out = Vec::new();
        while let Some(f) = decode_frame(&mut buf, 0).unwrap() {
            out.push(f);
        }
        assert!(buf.is_empty());
        out
    }

    #[test]
    fn template_is_publish_header_body_with_the_send_time_first() {
        let tpl = Template::new("q1", 16, true, 131_072);
        let mut wire = Vec::new();
        tpl.append(&mut wire, 0x0102_0304_0506_0708);
        tpl.append(&mut wire, 42);
        assert_eq!(wire.len(), 2 * tpl.wire_len());
        let f = frames(&wire);
        assert_eq!(f.len(), 6);
        match &f[0] {
            Frame::Publish {
                channel: 1,
                publish: p,
            } => {
                assert_eq!(&*p.exchange, "");
                assert_eq!(&*p.routing_key, "q1");
            }
            other => panic!("{other:?}"),
        }
        match &f[1] {
            Frame::Header {
                body_size: 16,
                properties,
                ..
            } => {
                assert_eq!(properties.delivery_mode(), &Some(2));
            }
            other => panic!("{other:?}"),
        }
        let Frame::Body { payload, .. } = &f[2] else {
            panic!()
        };
        assert_eq!(payload.len(), 16);
        assert_eq!(&payload[..8], &0x0102_0304_0506_0708u64.to_be_bytes());
        assert_eq!(&payload[8..], &[0; 8]);
        let Frame::Body { payload, .. } = &f[5] else {
            panic!()
        };
        assert_eq!(&payload[..8], &42u64.to_be_bytes());
    }

    #[test]
    fn template_splits_large_bodies_and_skips_the_timestamp_for_tiny_ones() {
        let tpl = Template::new("q", 10_000, false, 4096);
        let mut wire = Vec::new();
        tpl.append(&mut wire, 7);
        let f = frames(&wire);
        assert_eq!(f.len(), 2 + 3); // 10000 octets in 4088-octet frames
        let Frame::Header { properties, .. } = &f[1] else {
            panic!()
        };
        assert_eq!(properties.delivery_mode(), &Some(1));
        let Frame::Body { payload, .. } = &f[2] else {
            panic!()
        };
        assert_eq!(&payload[..8], &7u64.to_be_bytes());

        let tiny = Template::new("q", 4, false, 4096);
        let mut wire = Vec::new();
        tiny.append(&mut wire, u64::MAX);
        let f = frames(&wire);
        let Frame::Body { payload, .. } = &f[2] else {
            panic!()
        };
        assert_eq!(&payload[..], &[0; 4]);
        let empty = Template::new("q", 0, false, 4096);
        let mut wire = Vec::new();
        empty.append(&mut wire, 1);
        assert_eq!(frames(&wire).len(), 2);
    }

    #[test]
    fn confirms_single_multiple_out_of_order_and_nacks() {
        let mut c = Confirms::new(6); // ring of 8
        for seq in 1..=6 {
            c.sent(seq, seq * 1_000_000);
        }
        c.on_ack(2, false, false, 6, 10_000_000); // out of order: 1 still open
        assert_eq!((c.done_upto, c.confirmed), (0, 1));
        c.on_ack(3, true, false, 6, 10_000_000); // 1 and 3 (2 already done)
        assert_eq!((c.done_upto, c.confirmed), (3, 3));
        c.on_ack(4, false, true, 6, 10_000_000);
        assert_eq!((c.done_upto, c.nacked), (4, 1));
        c.on_ack(3, true, false, 6, 10_000_000); // repeated: no effect
        assert_eq!(c.confirmed, 3);
        c.on_ack(99, true, false, 6, 10_000_000); // beyond what was sent: clamped
        assert_eq!((c.done_upto, c.confirmed), (6, 5));
        // latencies 10ms - seq ms for seq 1,2,3,5,6 → 9,8,7,5,4 ms
        assert_eq!(c.hist.len(), 5);
        assert_eq!(c.hist.max(), c.hist.highest_equivalent(9_000));
        assert_eq!(c.hist.min(), c.hist.lowest_equivalent(4_000));
        // the ring wraps: slots are reused by later sequence numbers
        for seq in 7..=12 {
            c.sent(seq, 20_000_000);
        }
        c.on_ack(12, true, false, 12, 21_000_000);
        assert_eq!((c.done_upto, c.confirmed), (12, 11));
    }

    #[test]
    fn batch_size_is_64_kib_of_publishes_or_the_frames_per_write() {
        assert_eq!(batch_max(None, 1024), 64);
        assert_eq!(batch_max(None, 100_000), 1, "a large message still goes");
        assert_eq!(batch_max(Some(1), 60), 1);
        assert_eq!(batch_max(Some(10), 60), 10);
    }
}
