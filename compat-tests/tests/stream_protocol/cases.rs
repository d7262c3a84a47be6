//! The case scripts of `compat-tests/python/stream/` that a broker answers
//! as RabbitMQ does (most of them checked against RabbitMQ 3.10.8 with
//! `--rabbitmq`), and the js client's smoke test.

use super::*;

/// Every case of the rstream script gets RabbitMQ 3.10's answer: create and
/// delete, confirms, first / offset / next / last, stored offsets,
/// deduplication, raw and AMQP 1.0 bodies, both protocols on one stream,
/// metadata, bad input (with a bystander consumer that must keep working)
/// and a wrong password.
#[test]
fn rstream_gets_the_answers_rabbitmq_3_10_gives() {
    let broker = Broker::start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stream/stream_protocol.py");
    let (ok, out) = run(
        &[
            script.to_str().expect("utf-8 path"),
            &broker.stream_port.to_string(),
            &broker.amqp_port.to_string(),
        ],
        Duration::from_secs(240),
    );
    assert!(ok, "a case differs from RabbitMQ 3.10:\n{out}");
    assert!(
        out.lines().filter(|l| l.starts_with("ok ")).count() >= 40,
        "{out}"
    );
}

/// Super streams as RabbitMQ 3.10 makes them (a direct exchange with
/// `x-super-stream`, streams bound with `x-stream-partition-order`, by AMQP
/// declares): route and partitions by raw frames, then rstream's
/// SuperStreamProducer (hash and key routing) and SuperStreamConsumer.
/// The raw cases pass against RabbitMQ 3.10.8 too (under the request key);
/// rstream cannot read 3.10's answers, which the script checks with
/// `--rabbitmq`.
#[test]
fn super_streams_route_and_partition_as_rabbitmq_binds_them() {
    let broker = Broker::start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stream/super_stream.py");
    let (ok, out) = run(
        &[
            script.to_str().expect("utf-8 path"),
            &broker.stream_port.to_string(),
            &broker.amqp_port.to_string(),
        ],
        Duration::from_secs(120),
    );
    assert!(ok, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        9,
        "{out}"
    );
}

/// Create and delete super stream (0x1d, 0x1e; RabbitMQ 3.13+, which 3.10
/// lacks, so the script checks what rabbit_stream_reader and
/// rabbit_stream_manager answer): rstream's create_super_stream makes the
/// exchange, the streams with their arguments and the bindings (seen through
/// the management API), route, partitions, SuperStreamProducer and
/// SuperStreamConsumer work on it, the error codes (0x05, 0x11, 0x10, 0x02),
/// and delete_super_stream removes all of it.
#[test]
fn create_and_delete_super_stream_as_rabbitmq_3_13() {
    let broker = Broker::start();
    let url = format!("http://127.0.0.1:{}", broker.management_port);
    run_cases(
        "super_stream_create.py",
        &[broker.stream_port.to_string(), url],
        Duration::from_secs(120),
        24,
    );
}

/// Resolve offset spec (0x1f; RabbitMQ 4.3+, which 3.10 lacks, so the
/// script checks what rabbit_stream_reader answers): first, last, next, an
/// offset and timestamps resolve to where a subscription would start, a
/// missing stream is 0x02 and a stream the user may not read 0x10 (checked
/// first), each with offset 0, and the connection goes on.
#[test]
fn resolve_offset_spec_as_rabbitmq_4_3() {
    let broker = Broker::start();
    let url = format!("http://127.0.0.1:{}", broker.management_port);
    run_cases(
        "resolve_offset_spec.py",
        &[
            broker.stream_port.to_string(),
            broker.amqp_port.to_string(),
            url,
        ],
        Duration::from_secs(60),
        10,
    );
}

/// Single active consumer (RabbitMQ 3.11+; 3.10 has none, so the script
/// checks RabbitMQ's documented rules): on a stream, one member of a group
/// reads, and the next takes over at its stored offset + 1 when the active
/// one unsubscribes or its connection closes; on a super stream, partition
/// i goes to member i % members, a member giving way being told first.
#[test]
fn single_active_consumers_take_turns_on_streams_and_partitions() {
    let broker = Broker::start();
    run_cases(
        "single_active.py",
        &[broker.stream_port.to_string(), broker.amqp_port.to_string()],
        Duration::from_secs(120),
        13,
    );
}

/// Sub-entry batches with every compression code (none, gzip, and snappy,
/// lz4 and zstd in the framed formats the Java and Go stream clients
/// write, registered into rstream with cramjam) are stored as their
/// records, read back in order from both protocols; a body that is not
/// what its header says is a publish error and stores nothing. The script
/// passes against RabbitMQ 3.10.8 with `--rabbitmq` too (there the bad
/// batches are stored unread).
#[test]
fn sub_entry_batches_of_every_codec_are_stored_as_their_records() {
    let broker = Broker::start();
    run_cases(
        "compression.py",
        &[broker.stream_port.to_string(), broker.amqp_port.to_string()],
        Duration::from_secs(120),
        23,
    );
}

/// What rstream's and rabbitmq-stream-js-client's own suites
/// (`scripts/stream-suites.sh`) found StableMQ answering otherwise than
/// RabbitMQ 3.10.8, each case as 3.10.8 answers it (the script passes
/// against it with `--rabbitmq`): deduplication within one frame and of id
/// 0, gzip sub-entries, `last` as the newest publish frame, a metadata
/// update for an idle publisher's deleted stream, a management close
/// without a close frame, the empty stream name.
#[test]
fn what_the_clients_suites_found_is_answered_as_rabbitmq_3_10_does() {
    let broker = Broker::start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stream/suite_findings.py");
    let (ok, out) = run(
        &[
            script.to_str().expect("utf-8 path"),
            &broker.stream_port.to_string(),
            &broker.amqp_port.to_string(),
            &format!("http://127.0.0.1:{}", broker.management_port),
        ],
        Duration::from_secs(120),
    );
    assert!(ok, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        9,
        "{out}"
    );
}

/// A resource alarm blocks a publishing stream connection (its socket is
/// no longer read, so its publishes wait unconfirmed) and refuses a new
/// publisher with precondition failed, as RabbitMQ's stream reader does for a
/// disk alarm; once it clears every waiting publish is stored, once, in
/// order. The alarm is a memory watermark of one byte, set and cleared with
/// `stablemq ctl` (StableMQ blocks stream publishers on both alarms). The
/// script passes against RabbitMQ 3.10.8 with a disk alarm
/// (`rabbitmqctl set_disk_free_limit`).
#[test]
fn a_resource_alarm_blocks_stream_publishers_until_it_clears() {
    let broker = Broker::start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stream/alarm.py");
    let ctl = |args: &str| {
        format!(
            "{} ctl --url http://127.0.0.1:{} set_vm_memory_high_watermark {args}",
            compat_tests::binary_path().display(),
            broker.management_port
        )
    };
    let (ok, out) = run(
        &[
            script.to_str().expect("utf-8 path"),
            &broker.stream_port.to_string(),
            &format!("http://127.0.0.1:{}", broker.management_port),
            &ctl("absolute 1"),
            &ctl("0.99"),
        ],
        Duration::from_secs(150),
    );
    assert!(ok, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        5,
        "{out}"
    );
}

/// rabbitmq_stream_management's endpoints (`/api/stream/connections`,
/// `/publishers`, `/consumers`, per vhost, stream and connection) list a
/// publisher and a consumer with RabbitMQ 3.10.8's fields and counts; the
/// script's checks pass against RabbitMQ 3.10.8 with that plugin too.
#[test]
fn the_stream_management_endpoints_list_publishers_and_consumers() {
    let broker = Broker::start();
    let url = format!("http://127.0.0.1:{}", broker.management_port);
    run_cases(
        "stream_api.py",
        &[broker.stream_port.to_string(), url],
        Duration::from_secs(90),
        19,
    );
}

/// Stream filtering (3.13+) over both protocols (`python/stream/filtering.py`):
/// a filtered subscription gets no chunk that holds only other values, an
/// AMQP 0-9-1 consumer only matching entries, across protocols, and the
/// filter values are still there after a SIGKILL restart.
#[test]
fn stream_filtering_over_both_protocols_survives_a_kill_9_restart() {
    let mut broker = Broker::start();
    let ports = [broker.stream_port.to_string(), broker.amqp_port.to_string()];
    let phase = |p: &str| [ports[0].clone(), ports[1].clone(), p.to_owned()];
    run_cases(
        "filtering.py",
        &phase("write"),
        Duration::from_secs(180),
        15,
    );
    broker.kill9();
    broker.start_again();
    run_cases("filtering.py", &phase("check"), Duration::from_secs(90), 3);
}

/// The npm client rabbitmq-stream-js-client (installed by scripts/test.sh
/// into compat-tests/js/stream) publishes 100 with confirms and reads them
/// back from `first`, unpatched: it asks for the server's command versions,
/// which StableMQ answers (RabbitMQ 3.10 does not, and this client then dies;
/// the script patches that out only for 3.10).
#[test]
fn the_js_stream_client_publishes_and_consumes() {
    let broker = Broker::start();
    run_js_smoke(broker.stream_port);
}
