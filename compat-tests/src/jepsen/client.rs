//! The clients of a partition run, in the root namespace, over lapin.
//!
//! Publishers send persistent messages with confirms, each with a unique id
//! (publisher << 40 | sequence) as its 8-byte body, and record for every id
//! the node they were connected to, when it was published and when (if ever)
//! it was confirmed. A publisher that loses its connection, or waits too long
//! for a confirm, moves on to the next node with fresh ids: what it had in
//! flight stays unconfirmed (indeterminate), so a duplicate in the drain is
//! the broker's, not a republish. [`probe`] holds an idle connection to one
//! node and records when and how the broker closes it. [`drain`] reads a
//! queue to empty at the end.

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::time::timeout;

/// Publishes per round of confirms.
const WINDOW: u64 = 20;
/// How long a publisher waits for a round's confirms before it gives the
/// node up (a paused node never answers).
const CONFIRM_WAIT: Duration = Duration::from_secs(3);
/// Bound on connecting to one node (connection, channel, confirm.select,
/// queue.declare).
const CONNECT_WAIT: Duration = Duration::from_secs(2);

/// One published message.
#[derive(Debug, Clone)]
pub struct Msg {
    /// The node the publisher was connected to (0-based).
    pub node: usize,
    /// When its basic.publish was written.
    pub published: Instant,
    /// When its basic.ack arrived.
    pub confirmed: Option<Instant>,
    /// Whether it was nacked.
    pub nacked: bool,
}

/// Every message published, by id, and a count of confirms for waiting on
/// progress without scanning the map.
#[derive(Default)]
pub struct Book {
    /// The messages, by id.
    pub msgs: Mutex<HashMap<u64, Msg>>,
    /// How many acks have arrived.
    pub acks: AtomicU64,
}

/// The shared [`Book`].
pub type History = Arc<Book>;

/// A running publisher.
pub struct Publisher {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

/// Connect to `uri`, open a confirming channel and declare `queue`.
async fn open(uri: &str, queue: &str, confirm: bool) -> Option<(Connection, Channel)> {
    let attempt = timeout(CONNECT_WAIT, async {
        let conn = Connection::connect(uri, ConnectionProperties::default()).await?;
        let ch = conn.create_channel().await?;
        if confirm {
            ch.confirm_select(ConfirmSelectOptions::default()).await?;
        }
        ch.queue_declare(
            queue.into(),
            QueueDeclareOptions::durable(),
            FieldTable::default(),
        )
        .await?;
        Ok::<_, lapin::Error>((conn, ch))
    })
    .await;
    match attempt {
        Ok(Ok(pair)) => Some(pair),
        _ => None,
    }
}

/// Publish one round on `ch`; false when the node must be given up.
async fn round(ch: &Channel, queue: &str, node: usize, ids: &[u64], history: &History) -> bool {
    let mut confirms = Vec::with_capacity(ids.len());
    for id in ids {
        history.msgs.lock().expect("history").insert(
            *id,
            Msg {
                node,
                published: Instant::now(),
                confirmed: None,
                nacked: false,
            },
        );
        let sent = ch
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                &id.to_be_bytes(),
                BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_message_id(id.to_string().into()),
            )
            .await;
        match sent {
            Ok(c) => confirms.push((*id, c)),
            Err(_) => return false,
        }
    }
    let deadline = tokio::time::Instant::now() + CONFIRM_WAIT;
    for (id, c) in confirms {
        match tokio::time::timeout_at(deadline, c).await {
            Ok(Ok(conf)) => {
                let mut h = history.msgs.lock().expect("history");
                if let Some(m) = h.get_mut(&id) {
                    if conf.is_ack() {
                        m.confirmed = Some(Instant::now());
                        history.acks.fetch_add(1, Ordering::Relaxed);
                    } else {
                        m.nacked = true;
                    }
                }
            }
            Ok(Err(_)) | Err(_) => return false,
        }
    }
    true
}

async fn publish_loop(
    p: u64,
    uris: Vec<String>,
    queue: String,
    rate: u32,
    stop: Arc<AtomicBool>,
    history: History,
) {
    let mut next = p << 40;
    let mut at = p as usize % uris.len();
    let pause = Duration::from_secs_f64(WINDOW as f64 / f64::from(rate.max(1)));
    while !stop.load(Ordering::Relaxed) {
        let Some((_conn, ch)) = open(&uris[at], &queue, true).await else {
            at = (at + 1) % uris.len();
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            let t0 = tokio::time::Instant::now();
            let ids: Vec<u64> = (next..next + WINDOW).collect();
            next += WINDOW;
            if !round(&ch, &queue, at, &ids, &history).await {
                break;
            }
            tokio::time::sleep_until(t0 + pause).await;
        }
        at = (at + 1) % uris.len();
    }
}

/// Connect to node `node` at `uri` and publish one round of ids from
/// `first`, recording them in `history` like any publisher's: used to
/// publish through a node that is cut off, whose confirms must not come.
pub async fn one_round(uri: String, queue: String, node: usize, first: u64, history: History) {
    if let Some((_conn, ch)) = open(&uri, &queue, true).await {
        let ids: Vec<u64> = (first..first + WINDOW).collect();
        round(&ch, &queue, node, &ids, &history).await;
    }
}

impl Publisher {
    /// Start publisher `p` (it connects to node `p % n` first) at about
    /// `rate` messages a second.
    pub fn start(p: u64, uris: Vec<String>, queue: &str, rate: u32, history: History) -> Publisher {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(publish_loop(
            p,
            uris,
            queue.to_string(),
            rate,
            stop.clone(),
            history,
        ));
        Publisher { stop, task }
    }

    /// Stop publishing; what is in flight is given up after at most the
    /// confirm wait.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let abort = self.task.abort_handle();
        if timeout(CONFIRM_WAIT + CONNECT_WAIT * 2, self.task)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
}

/// How the broker closed a probe connection: when, and the reply code.
pub type Closed = Arc<Mutex<Option<(Instant, Option<u16>)>>>;

/// An idle connection to `uri`, kept until it is dropped; `closed` gets the
/// time and reply code of the broker's connection.close (or of the socket's
/// end) as soon as lapin reports it.
pub struct Probe {
    /// Filled in when the connection ends.
    pub closed: Closed,
    _conn: Connection,
    task: tokio::task::JoinHandle<()>,
}

/// Open a [`Probe`] to `uri`; None if the node does not accept a client.
pub async fn probe(uri: &str) -> Option<Probe> {
    let conn = timeout(
        CONNECT_WAIT,
        Connection::connect(uri, ConnectionProperties::default()),
    )
    .await
    .ok()?
    .ok()?;
    let closed: Closed = Arc::new(Mutex::new(None));
    let mut events = Box::pin(conn.events_listener());
    let c2 = closed.clone();
    let task = tokio::spawn(async move {
        while let Some(e) = events.next().await {
            if let lapin::Event::Error(e) = e {
                let code = match e.kind() {
                    lapin::ErrorKind::ProtocolError(p) => Some(p.get_id()),
                    _ => None,
                };
                *c2.lock().expect("closed") = Some((Instant::now(), code));
                return;
            }
        }
    });
    Some(Probe {
        closed,
        _conn: conn,
        task,
    })
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Read `queue` on `uri` until it is empty, pushing every id delivered (with
/// repeats) onto `ids`. Err if the node fails mid-way: the caller tries
/// again, keeping what `ids` holds (those were acked).
pub async fn drain(
    uri: &str,
    queue: &str,
    bound: Duration,
    ids: &mut Vec<u64>,
) -> Result<(), String> {
    let (conn, ch) = open(uri, queue, false).await.ok_or("cannot connect")?;
    ch.basic_qos(500, BasicQosOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "jepsen-drain".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let check = conn.create_channel().await.map_err(|e| e.to_string())?;
    let deadline = Instant::now() + bound;
    loop {
        if Instant::now() > deadline {
            return Err(format!("queue not empty after {bound:?}"));
        }
        match timeout(Duration::from_millis(1000), consumer.next()).await {
            Ok(Some(Ok(d))) => {
                let bytes: [u8; 8] = d
                    .data
                    .as_slice()
                    .try_into()
                    .map_err(|_| format!("a body of {} bytes", d.data.len()))?;
                ids.push(u64::from_be_bytes(bytes));
                d.acker
                    .ack(BasicAckOptions::default())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(Some(Err(e))) => return Err(e.to_string()),
            Ok(None) => return Err("consumer cancelled".into()),
            Err(_) => {
                // Idle for a second: done if nothing is ready.
                let q = check
                    .queue_declare(
                        queue.into(),
                        QueueDeclareOptions {
                            passive: true,
                            ..Default::default()
                        },
                        FieldTable::default(),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                if q.message_count() == 0 {
                    return Ok(());
                }
            }
        }
    }
}
