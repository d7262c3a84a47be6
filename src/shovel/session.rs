//! One run of the shovel: connect to both brokers, check the queues, move
//! the messages (publish, await the confirm, ack the source), and report.

use super::{IDLE_CHECK, ShovelArgs, ShovelError, ShovelReport, Target, redact};
use futures_lite::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Confirmation, Consumer, PublisherConfirm};
use lapin::{Connection, ConnectionProperties};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

/// A message published to the destination, not yet confirmed.
struct InFlight {
    /// Its delivery tag at the source, acked once `confirm` resolves.
    src_tag: u64,
    confirm: PublisherConfirm,
}

/// Poll a future once: Ready with its output, or Pending (its waker stays
/// registered, so a later `select!` still wakes for it).
async fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *f).poll(cx))).await
}

/// Wait for the oldest in-flight publish's confirm; never resolves when
/// nothing is in flight.
async fn oldest_confirm(
    pending: &mut VecDeque<InFlight>,
) -> (u64, Result<Confirmation, lapin::Error>) {
    match pending.front_mut() {
        Some(f) => {
            let r = (&mut f.confirm).await;
            (f.src_tag, r)
        }
        None => std::future::pending().await,
    }
}

/// Connect to the broker at `uri`, naming the connection `name`; over TLS
/// with `tls` (an `amqps://` URI).
async fn connect(
    uri: &str,
    name: &str,
    tls: Option<lapin::tcp::OwnedTLSConfig>,
) -> Result<Connection, lapin::Error> {
    let props = ConnectionProperties::default().with_connection_name(name.into());
    match tls {
        None => Connection::connect(uri, props).await,
        Some(tls) => {
            let runtime = lapin::runtime::default_runtime()?;
            Connection::connect_with_config(uri, props, tls, runtime).await
        }
    }
}

/// The options of a passive queue declare (does the queue exist, how full).
fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..Default::default()
    }
}

/// Run the shovel until the source is empty (with `--exit-when-empty`),
/// `--max-messages` were moved, Ctrl-C, or an error.
pub async fn run(args: &ShovelArgs) -> Result<ShovelReport, ShovelError> {
    check_flags(args)?;
    let started = Instant::now();
    let plan = Plan {
        args,
        src_uri: redact(&args.src_uri),
        dest_uri: redact(&args.dest_uri),
        target: Target::of(args),
    };
    let session = Session::open(&plan).await?;
    session.check_queues().await?;
    let mut consumer = session.start_consuming().await?;
    let mut report = session.move_messages(&mut consumer).await?;
    session.finish(&mut report).await?;
    report.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(report)
}

/// Refuse the flags a run cannot honour.
fn check_flags(args: &ShovelArgs) -> Result<(), ShovelError> {
    if args.prefetch == 0 {
        return Err(ShovelError::Usage(
            "--prefetch must be at least 1 (0 would mean unlimited)".into(),
        ));
    }
    if args.confirm_window == 0 {
        return Err(ShovelError::Usage(
            "--confirm-window must be at least 1".into(),
        ));
    }
    Ok(())
}

/// What a run knows before it connects: its flags, where messages go, and
/// the brokers' URIs without their passwords, for the errors.
struct Plan<'a> {
    /// The flags.
    args: &'a ShovelArgs,
    /// The source URI, redacted.
    src_uri: String,
    /// The destination URI, redacted.
    dest_uri: String,
    /// Where every message goes at the destination.
    target: Target,
}

impl Plan<'_> {
    /// The error of the source operation `what`, for `map_err`.
    fn src_err(&self, what: &'static str) -> impl FnOnce(lapin::Error) -> ShovelError + use<> {
        let uri = self.src_uri.clone();
        move |source| ShovelError::Source { uri, what, source }
    }

    /// The error of the destination operation `what`, for `map_err`.
    fn dest_err(&self, what: &'static str) -> impl FnOnce(lapin::Error) -> ShovelError + use<> {
        let uri = self.dest_uri.clone();
        move |source| ShovelError::Dest { uri, what, source }
    }
}

/// The connections and channels of a run.
///
/// The fields are in the order they drop in, the reverse of the order they
/// open in (as the locals they were).
struct Session<'a> {
    /// Publishes to the destination, in confirm mode.
    dest_ch: Channel,
    /// A second channel for the passive declares: a failed one closes its
    /// channel, and the consuming channel must survive that.
    src_probe: Channel,
    /// Consumes the source queue and acks it.
    src_ch: Channel,
    /// The destination broker.
    dest: Connection,
    /// The source broker.
    src: Connection,
    /// The flags, target and URIs.
    plan: &'a Plan<'a>,
}

/// The state of the moving loop.
struct Progress {
    /// The counts so far.
    report: ShovelReport,
    /// The messages published and not yet confirmed, oldest first.
    pending: VecDeque<InFlight>,
    /// Set by Ctrl-C or an empty source: take no more deliveries.
    stopping: bool,
    /// When the last progress line was printed.
    last_progress: Instant,
}

impl<'a> Session<'a> {
    /// Connect to both brokers and open the channels.
    async fn open(plan: &'a Plan<'a>) -> Result<Session<'a>, ShovelError> {
        let ca = plan.args.tls_ca_file.as_deref();
        let src_tls = super::tls::for_uri(&plan.args.src_uri, ca)?;
        let dest_tls = super::tls::for_uri(&plan.args.dest_uri, ca)?;
        let src = connect(&plan.args.src_uri, "stablemq shovel (source)", src_tls)
            .await
            .map_err(plan.src_err("connect"))?;
        let dest = connect(
            &plan.args.dest_uri,
            "stablemq shovel (destination)",
            dest_tls,
        )
        .await
        .map_err(plan.dest_err("connect"))?;
        let src_ch = src
            .create_channel()
            .await
            .map_err(plan.src_err("open channel"))?;
        let src_probe = src
            .create_channel()
            .await
            .map_err(plan.src_err("open channel"))?;
        let dest_ch = dest
            .create_channel()
            .await
            .map_err(plan.dest_err("open channel"))?;
        Ok(Session {
            dest_ch,
            src_probe,
            src_ch,
            dest,
            src,
            plan,
        })
    }

    /// Check that the source queue exists, and the destination queue when
    /// the target is one.
    async fn check_queues(&self) -> Result<(), ShovelError> {
        let plan = self.plan;
        self.src_probe
            .queue_declare(
                plan.args.src_queue.as_str().into(),
                passive(),
                FieldTable::default(),
            )
            .await
            .map_err(plan.src_err("find the source queue (passive declare)"))?;
        if let Target::Queue(q) = &plan.target {
            // Fail before moving anything, rather than on the first message.
            let probe = self
                .dest
                .create_channel()
                .await
                .map_err(plan.dest_err("open channel"))?;
            probe
                .queue_declare(q.as_str().into(), passive(), FieldTable::default())
                .await
                .map_err(plan.dest_err(
                    "find the destination queue (passive declare; import the definitions first)",
                ))?;
            let _ = probe.close(200, "OK".into()).await;
        }
        Ok(())
    }

    /// Put the destination channel in confirm mode, set the prefetch window
    /// and start consuming the source queue.
    async fn start_consuming(&self) -> Result<Consumer, ShovelError> {
        let plan = self.plan;
        self.dest_ch
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(plan.dest_err("confirm.select"))?;
        self.src_ch
            .basic_qos(plan.args.prefetch, BasicQosOptions::default())
            .await
            .map_err(plan.src_err("basic.qos"))?;
        self.src_ch
            .basic_consume(
                plan.args.src_queue.as_str().into(),
                "stablemq-shovel".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(plan.src_err("basic.consume"))
    }

    /// The loop: forward deliveries, settle confirms and ack the source,
    /// until there is nothing more to take and nothing in flight.
    async fn move_messages(&self, consumer: &mut Consumer) -> Result<ShovelReport, ShovelError> {
        let args = self.plan.args;
        let mut m = Progress {
            report: ShovelReport::default(),
            pending: VecDeque::new(),
            stopping: false,
            last_progress: Instant::now(),
        };
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        let limit = args.max_messages.unwrap_or(u64::MAX);
        loop {
            self.settle_arrived(&mut m).await?;
            if m.last_progress.elapsed() >= Duration::from_secs(5) {
                m.last_progress = Instant::now();
                eprintln!(
                    "stablemq shovel: {} moved, {} in flight",
                    m.report.moved,
                    m.pending.len()
                );
            }
            let taking = !m.stopping && m.report.published < limit;
            if !taking && m.pending.is_empty() {
                break;
            }
            let can_take = taking && m.pending.len() < args.confirm_window;
            tokio::select! {
                biased;
                (tag, r) = oldest_confirm(&mut m.pending) => {
                    check_confirm(tag, r, self.plan)?;
                    m.pending.pop_front();
                    m.report.moved += 1;
                    self.ack_source(tag).await?;
                }
                _ = &mut ctrl_c, if !m.stopping => {
                    eprintln!("stablemq shovel: interrupted; finishing the {} messages in flight", m.pending.len());
                    m.stopping = true;
                }
                next = consumer.next(), if can_take => {
                    let delivery = match next {
                        Some(Ok(d)) => d,
                        Some(Err(e)) => return Err(self.plan.src_err("consume")(e)),
                        None => return Err(ShovelError::Cancelled(args.src_queue.clone())),
                    };
                    self.forward(delivery, &mut m).await?;
                }
                _ = tokio::time::sleep(IDLE_CHECK), if args.exit_when_empty && can_take && m.pending.is_empty() => {
                    if self.source_is_empty().await? {
                        m.stopping = true;
                    }
                }
            }
        }
        Ok(m.report)
    }

    /// Settle every confirm that has already arrived, then ack the source
    /// once for all of them.
    async fn settle_arrived(&self, m: &mut Progress) -> Result<(), ShovelError> {
        let mut ack_upto = None;
        while let Some(front) = m.pending.front_mut() {
            match poll_once(&mut front.confirm).await {
                Poll::Pending => break,
                Poll::Ready(r) => {
                    let tag = front.src_tag;
                    check_confirm(tag, r, self.plan)?;
                    m.pending.pop_front();
                    ack_upto = Some(tag);
                    m.report.moved += 1;
                }
            }
        }
        if let Some(tag) = ack_upto {
            self.ack_source(tag).await?;
        }
        Ok(())
    }

    /// Ack the source up to `tag`, every older delivery with it.
    async fn ack_source(&self, tag: u64) -> Result<(), ShovelError> {
        self.src_ch
            .basic_ack(tag, BasicAckOptions { multiple: true })
            .await
            .map_err(self.plan.src_err("basic.ack"))
    }

    /// Publish one delivery to the destination, mandatory, and keep its
    /// confirm in flight.
    async fn forward(&self, delivery: Delivery, m: &mut Progress) -> Result<(), ShovelError> {
        if delivery.redelivered {
            m.report.redelivered += 1;
        }
        let (exchange, routing_key) = self.plan.target.route(delivery.routing_key.as_str());
        let confirm = self
            .dest_ch
            .basic_publish(
                exchange.into(),
                routing_key.into(),
                BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                },
                &delivery.data,
                delivery.properties,
            )
            .await
            .map_err(self.plan.dest_err("basic.publish"))?;
        m.report.published += 1;
        m.pending.push_back(InFlight {
            src_tag: delivery.delivery_tag,
            confirm,
        });
        Ok(())
    }

    /// The source queue's ready messages, by a passive declare on the probe
    /// channel; `what` names the step in an error.
    async fn source_count(&self, what: &'static str) -> Result<u32, ShovelError> {
        let q = self
            .src_probe
            .queue_declare(
                self.plan.args.src_queue.as_str().into(),
                passive(),
                FieldTable::default(),
            )
            .await
            .map_err(self.plan.src_err(what))?;
        Ok(q.message_count())
    }

    /// Whether the source queue has no message ready (`--exit-when-empty`).
    async fn source_is_empty(&self) -> Result<bool, ShovelError> {
        Ok(self
            .source_count("check the source queue (passive declare)")
            .await?
            == 0)
    }

    /// Stop consuming, count what is left at the source, and close both
    /// connections.
    async fn finish(&self, report: &mut ShovelReport) -> Result<(), ShovelError> {
        // Nothing is in flight and everything moved is acked. Deliveries the
        // source sent beyond --max-messages (or after the empty check) are not
        // acked: the channel close below requeues them at the source.
        let _ = self
            .src_ch
            .basic_cancel("stablemq-shovel".into(), BasicCancelOptions::default())
            .await;
        let _ = self.src_ch.close(200, "OK".into()).await;
        report.source_remaining = self
            .source_count("count the source queue (passive declare)")
            .await?;
        let _ = self.dest.close(200, "OK".into()).await;
        let _ = self.src.close(200, "OK".into()).await;
        Ok(())
    }
}

/// Turn one destination confirm into "moved" or the reason the shovel stops.
fn check_confirm(
    src_tag: u64,
    r: Result<Confirmation, lapin::Error>,
    plan: &Plan<'_>,
) -> Result<(), ShovelError> {
    match r {
        Ok(Confirmation::Ack(None)) => Ok(()),
        Ok(Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned))) => {
            Err(ShovelError::Unroutable {
                exchange: returned.delivery.exchange.to_string(),
                routing_key: returned.delivery.routing_key.to_string(),
                reply: format!("{} {}", returned.reply_code, returned.reply_text),
            })
        }
        Ok(Confirmation::Nack(None)) => Err(ShovelError::Nacked(src_tag)),
        // Confirm mode is on, so this cannot be a confirm: treat it as a nack.
        Ok(Confirmation::NotRequested) => Err(ShovelError::Nacked(src_tag)),
        Err(e) => Err(plan.dest_err("publisher confirm")(e)),
    }
}
