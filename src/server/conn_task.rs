//! One task per client socket: read, decode, run the connection machine, write.

use super::master_task::{InputCredit, MASTER_INPUTS, MasterMsg};
use super::route::ConnContext;
use super::socket::{ClientSocket, IntoHalves};
use crate::amqp::connection::{Action, Connection};
use crate::amqp::encode::Encoder;
use crate::master::inout::{ConnId, Input, ToConn};
use bytes::BytesMut;
use stablemq_protocol::{Decoder, check_protocol_header, encode_frame};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// Serve one connection until it closes.
pub(super) async fn run<S: IntoHalves>(id: ConnId, sock: ClientSocket<S>, ctx: ConnContext) {
    let ConnContext {
        config,
        master_tx: master,
        credit,
        mut shutdown,
        users,
        cluster_name,
        ..
    } = ctx;
    let (out_tx, mut out_rx) = super::outbox::channel();
    if master.send(MasterMsg::Register(id, out_tx)).await.is_err() {
        return;
    }
    // Bytes and reads/writes for the management API and Prometheus.
    let traffic = crate::metrics::conn_stats::register(id);
    let (mut rd, mut wr) = sock.stream.into_halves();
    let mut conn = Connection::new(id, sock.peer.ip(), config, Instant::now());
    conn.set_addresses(sock.peer, sock.local);
    if let Some(tls) = sock.tls {
        conn.set_tls(tls);
    }
    conn.set_users(users);
    conn.set_cluster_name(cluster_name);
    let mut b = Buffers::new();
    // The connection's clocks (handshake timeout, heartbeats, close): ticked
    // as often as its state needs (`tick_every`), re-armed when that changes.
    let mut tick_every = conn.tick_every();
    let mut tick = tokio::time::interval(tick_every);
    let mut reading = true;
    let mut outbox_open = true;
    let mut shutting_down = false;
    // One wait for the node's shutdown, kept across passes: made anew in
    // each pass's select it joined and left the watch's waiter list (a lock
    // each way) at every frame read and every delivery written.
    let mut shutdown_changed = std::pin::pin!(shutdown.changed());
    loop {
        tokio::select! {
            r = rd.read_buf(&mut b.rbuf), if reading && !conn.is_blocked() => {
                let now = Instant::now();
                match r {
                    Ok(0) | Err(_) => {
                        reading = false;
                        conn.on_eof(&mut b.actions);
                    }
                    Ok(n) => {
                        traffic.stats().received(n);
                        let before = b.actions.len();
                        decode_all(&mut conn, &mut b.rbuf, &mut b.decoder, now, &mut b.actions);
                        traffic.stats().frames(b.actions.len().saturating_sub(before).max(1));
                    }
                }
            }
            n = out_rx.recv_many(&mut b.inbox, 64), if outbox_open => {
                if n == 0 {
                    // The master dropped us (it closed the connection); the close
                    // handshake goes on without it.
                    outbox_open = false;
                }
                b.deliver_inbox(&mut conn);
            }
            _ = tick.tick() => conn.on_tick(Instant::now(), &mut b.actions),
            r = &mut shutdown_changed, if !shutting_down => {
                shutting_down = true;
                if r.is_ok() {
                    conn.shutdown(Instant::now(), &mut b.actions);
                }
            }
        }
        let mut close = b.carry_out(conn.frame_max());
        // Sent before anything of this pass is written, as each input was
        // sent before the write when they went one by one.
        if !b.inputs.is_empty() && send_inputs(&master, &credit, &mut b.inputs).await.is_err() {
            close = true;
        }
        b.enc.flush(&mut b.wbuf);
        if !b.wbuf.is_empty() {
            traffic.stats().sending(b.wbuf.len());
            if super::socket::write_out(&mut wr, &b.wbuf).await.is_err() {
                for i in eof_inputs(&mut conn) {
                    let _ = master.send(MasterMsg::Input(i)).await;
                }
                break;
            }
            traffic.stats().sent(b.wbuf.len());
            b.wbuf.clear();
            conn.note_sent(Instant::now());
        }
        if close || conn.is_closed() {
            break;
        }
        let every = conn.tick_every();
        if every != tick_every {
            tick_every = every;
            let first = tokio::time::Instant::now() + tick_every;
            tick = tokio::time::interval_at(first, tick_every);
        }
    }
    let _ = wr.shutdown().await;
    // Make sure the master forgets us even if we left without a clean close.
    let _ = master
        .send(MasterMsg::Input(Input::Disconnected { conn: id }))
        .await;
}

/// One connection's buffers, kept across the passes of its loop (fields of
/// one local: no cost over separate ones).
struct Buffers {
    /// Bytes read and not decoded yet.
    rbuf: BytesMut,
    /// The frame decoder (it holds a frame's parts until it is whole).
    decoder: Decoder,
    /// Bytes to write at the end of the pass.
    wbuf: BytesMut,
    /// What the connection asks of this pass.
    actions: Vec<Action>,
    /// What one pass (one socket read, usually) has for the master: sent
    /// together once the pass's actions are carried out.
    inputs: Vec<Input>,
    /// The master's messages, a batch per dispatch.
    inbox: Vec<Vec<ToConn>>,
    /// Encodes the master's messages into `wbuf`.
    enc: Encoder,
}

impl Buffers {
    /// Empty buffers of their usual sizes.
    fn new() -> Buffers {
        Buffers {
            rbuf: BytesMut::with_capacity(64 * 1024),
            decoder: Decoder::default(),
            wbuf: BytesMut::with_capacity(64 * 1024),
            // Small at first, grown by the load and kept (a Vec reused pass
            // after pass): an idle connection should not hold room for 64
            // actions of 152 bytes.
            actions: Vec::with_capacity(8),
            inputs: Vec::new(),
            inbox: Vec::with_capacity(8),
            enc: Encoder::default(),
        }
    }

    /// The master's messages received in one go, to the connection.
    fn deliver_inbox(&mut self, conn: &mut Connection) {
        // Each batch is one dispatch's messages for us, in order.
        for batch in self.inbox.drain(..) {
            for m in batch {
                conn.on_master(m, &mut self.actions);
            }
        }
    }

    /// Carry out the pass's actions: frames into `wbuf`, inputs into
    /// `inputs`. True if one of them closes the connection.
    fn carry_out(&mut self, frame_max: u32) -> bool {
        let mut close = false;
        let mut pass = self.actions.drain(..);
        while let Some(a) = pass.next() {
            match a {
                // Acks the encoder holds back came first: a frame written
                // here (a channel's close-ok) must not overtake them.
                Action::Write(f) => {
                    self.enc.flush(&mut self.wbuf);
                    encode_frame(&f, &mut self.wbuf)
                }
                Action::WriteRaw(b) => self.wbuf.extend_from_slice(&b),
                Action::Out(m) => self.enc.push(m, frame_max, &mut self.wbuf),
                Action::ToMaster(i) => {
                    // A batch leaves with its buffer: the next one is sized
                    // once for what this pass can hold, not grown (a grown
                    // Vec copies what it holds each time it doubles).
                    if self.inputs.capacity() == 0 {
                        self.inputs.reserve_exact(pass.len() + 1);
                    }
                    self.inputs.push(i)
                }
                Action::Close => close = true,
            }
        }
        close
    }
}

/// What the master must still hear of a connection whose socket failed.
fn eof_inputs(conn: &mut Connection) -> impl Iterator<Item = Input> {
    let mut tail = Vec::new();
    conn.on_eof(&mut tail);
    tail.into_iter().filter_map(|a| match a {
        Action::ToMaster(i) => Some(i),
        _ => None,
    })
}

/// The master task is gone (the node is stopping).
pub(super) struct MasterGone;

/// Send `inputs` (left empty) to the master, in order: a lone input as it
/// is, more as one batch for which credit is taken first (so a busy master
/// pushes back on this connection by the number of inputs waiting).
pub(super) async fn send_inputs(
    master: &mpsc::Sender<MasterMsg>,
    credit: &InputCredit,
    inputs: &mut Vec<Input>,
) -> Result<(), MasterGone> {
    if inputs.len() == 1 {
        let i = inputs.pop().ok_or(MasterGone)?;
        return master
            .send(MasterMsg::Input(i))
            .await
            .map_err(|_| MasterGone);
    }
    while !inputs.is_empty() {
        let n = inputs.len().min(MASTER_INPUTS as usize);
        let permit = credit.take(n as u32).await.ok_or(MasterGone)?;
        let batch = if n == inputs.len() {
            std::mem::take(inputs)
        } else {
            inputs.drain(..n).collect()
        };
        master
            .send(MasterMsg::Inputs(batch, permit))
            .await
            .map_err(|_| MasterGone)?;
    }
    Ok(())
}

/// Decode every complete frame in `rbuf`, with this connection's `decoder`.
fn decode_all(
    conn: &mut Connection,
    rbuf: &mut BytesMut,
    decoder: &mut Decoder,
    now: Instant,
    actions: &mut Vec<Action>,
) {
    if conn.awaiting_header() {
        if rbuf.len() < 8 {
            // A short wrong header can already be refused.
            if let stablemq_protocol::HeaderCheck::Bad = check_protocol_header(rbuf) {
                conn.on_header(stablemq_protocol::HeaderCheck::Bad, now, actions);
                rbuf.clear();
            }
            return;
        }
        let check = check_protocol_header(&rbuf[..8]);
        let ok = matches!(check, stablemq_protocol::HeaderCheck::Ok);
        conn.on_header(check, now, actions);
        if !ok {
            rbuf.clear();
            return;
        }
        let _ = rbuf.split_to(8);
    }
    loop {
        if conn.is_closed() {
            rbuf.clear();
            return;
        }
        match decoder.decode(rbuf, conn.decode_limit()) {
            Ok(Some(f)) => conn.on_frame(f, now, actions),
            Ok(None) => return,
            Err(e) => {
                conn.on_decode_error(&e, actions);
                // The stream is out of step; drop what we have and only look for close-ok.
                rbuf.clear();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disconnected(conn: ConnId) -> Input {
        Input::Disconnected { conn }
    }

    /// A read's inputs reach the master as one batch, in order, and a lone
    /// input as itself.
    #[tokio::test]
    async fn one_read_is_one_message_in_order() {
        let (tx, mut rx) = mpsc::channel(8);
        let credit = InputCredit::default();
        let mut inputs = vec![disconnected(1), disconnected(2), disconnected(3)];
        assert!(send_inputs(&tx, &credit, &mut inputs).await.is_ok());
        assert!(inputs.is_empty());
        let mut lone = vec![disconnected(4)];
        assert!(send_inputs(&tx, &credit, &mut lone).await.is_ok());
        match rx.recv().await {
            Some(MasterMsg::Inputs(batch, _)) => {
                let conns: Vec<_> = batch
                    .iter()
                    .map(|i| match i {
                        Input::Disconnected { conn } => *conn,
                        _ => 0,
                    })
                    .collect();
                assert_eq!(conns, [1, 2, 3]);
            }
            _ => panic!("expected one batch"),
        }
        assert!(matches!(
            rx.recv().await,
            Some(MasterMsg::Input(Input::Disconnected { conn: 4 }))
        ));
    }

    /// With the budget of waiting inputs spent, a connection waits until
    /// the master has handled a batch (dropped its credit).
    #[tokio::test]
    async fn a_spent_budget_holds_the_connection_back() {
        let (tx, mut rx) = mpsc::channel(8);
        let credit = InputCredit::default();
        let held = credit.take(MASTER_INPUTS - 1).await;
        assert!(held.is_some());
        let mut inputs = vec![disconnected(1), disconnected(2)];
        let send = send_inputs(&tx, &credit, &mut inputs);
        tokio::pin!(send);
        let waited = tokio::time::timeout(std::time::Duration::from_millis(100), &mut send).await;
        assert!(waited.is_err(), "sent without credit");
        assert!(rx.try_recv().is_err());
        drop(held);
        assert!(send.await.is_ok());
        assert!(matches!(rx.recv().await, Some(MasterMsg::Inputs(b, _)) if b.len() == 2));
    }
}
