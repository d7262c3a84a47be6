//! AMQPS end to end, against the real binary with certificates the test makes
//! (rcgen): TLS 1.3 with openssl s_client, pika with `SSLOptions` publishing
//! with confirms and consuming, SASL EXTERNAL with a client certificate,
//! `fail_if_no_peer_cert`, the management API's view of TLS, HTTPS for the
//! API, reload on SIGHUP and through the API, bad TLS input with a
//! bystander that keeps working (`bad_input.rs`), and a large message to a
//! client that reads late (`large.rs`); the stream protocol over TLS
//! (`stream.rs`).

use compat_tests::common;

mod bad_input;
mod client;
mod cluster;
mod large;
mod stream;

use client::{Pki, TlsBroker};
use common::*;
use compat_tests::free_port;
use lapin::protocol::AMQPClass;
use lapin::protocol::connection::AMQPMethod as ConnMethod;
use std::process::Command;
use std::time::Duration;

use compat_tests::common::python::python;

fn pika_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/tls/pika_amqps.py")
}

/// Run the pika script with a bounded wait; returns (success, stdout+stderr).
pub(crate) fn run_pika(args: &[String]) -> (bool, String) {
    let mut child = Command::new("timeout")
        .arg("60")
        .arg(python())
        .arg(pika_script())
        .args(args)
        .output()
        .expect("run pika");
    let mut text = String::from_utf8_lossy(&child.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&child.stderr));
    child.stdout.clear();
    (child.status.success(), text)
}

#[test]
fn openssl_s_client_negotiates_tls13_on_the_amqps_port() {
    let pki = Pki::new();
    let b = TlsBroker::start(&pki, "");
    let out = Command::new("timeout")
        .args(["20", "openssl", "s_client", "-brief", "-CAfile"])
        .arg(&pki.ca.cert_file)
        .arg("-connect")
        .arg(format!("127.0.0.1:{}", b.amqps_port))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl s_client");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Protocol version: TLSv1.3"), "{text}");
    assert!(text.contains("Verification: OK"), "{text}");
}

#[test]
fn pika_publishes_with_confirms_and_consumes_over_amqps() {
    let pki = Pki::new();
    let b = TlsBroker::start(&pki, "");
    let (ok, out) = run_pika(&[
        b.amqps_port.to_string(),
        pki.ca.cert_file.display().to_string(),
        "plain-login".into(),
    ]);
    assert!(
        ok && out.contains("ok 200 200"),
        "pika: {out}\n{}",
        b.broker.log()
    );
}

#[tokio::test]
async fn the_api_lists_the_amqps_listener_and_a_tls_connection() {
    let pki = Pki::new();
    let b = TlsBroker::start(&pki, "");
    let overview = b.api_get("/api/overview");
    let listeners = overview["listeners"].as_array().expect("listeners");
    let ssl = listeners
        .iter()
        .find(|l| l["protocol"] == "amqp/ssl")
        .unwrap_or_else(|| panic!("no amqp/ssl listener in {listeners:?}"));
    assert_eq!(ssl["port"], b.amqps_port);
    let mut raw = b.raw(None).await;
    let start = raw.read_start().await;
    assert_eq!(start.mechanisms.to_string(), "PLAIN AMQPLAIN");
    let tune = raw.start_ok("guest", "guest").await;
    raw.tune_ok_and_open(tune.channel_max, tune.frame_max, 0, "/")
        .await;
    let conns = b.api_get("/api/connections");
    let c = &conns.as_array().expect("connections")[0];
    assert_eq!(c["ssl"], true, "{c}");
    assert_eq!(c["ssl_protocol"], "tlsv1.3", "{c}");
    assert!(
        c["ssl_cipher"].as_str().is_some_and(|s| !s.is_empty()),
        "{c}"
    );
}

#[tokio::test]
async fn external_logs_in_as_the_certificate_cn() {
    let pki = Pki::new();
    // As in RabbitMQ, EXTERNAL is offered only when auth_mechanisms lists it.
    let off = TlsBroker::start(&pki, &pki.verify_peer_lines(false));
    let mut raw = off.raw(Some(&pki.alice)).await;
    let start = raw.read_start().await;
    assert_eq!(
        start.mechanisms.to_string(),
        "PLAIN AMQPLAIN",
        "EXTERNAL not configured"
    );
    match raw.start_ok_with("EXTERNAL", b"").await {
        AMQPClass::Connection(ConnMethod::Close(c)) => assert_eq!(c.reply_code, ACCESS_REFUSED),
        other => panic!("an unoffered EXTERNAL was accepted: {other:?}"),
    }
    drop(off);
    let top = "auth_mechanisms = [\"PLAIN\", \"AMQPLAIN\", \"EXTERNAL\"]";
    let b = TlsBroker::start_top(&pki, top, &pki.verify_peer_lines(false));
    b.add_user("alice");
    // A raw client first: EXTERNAL is offered with a verified certificate
    // only, and logs in as the certificate's CN with no password.
    let mut raw = b.raw(Some(&pki.alice)).await;
    let start = raw.read_start().await;
    assert!(
        start.mechanisms.to_string().contains("EXTERNAL"),
        "{:?}",
        start.mechanisms
    );
    match raw.start_ok_with("EXTERNAL", b"").await {
        AMQPClass::Connection(ConnMethod::Tune(_)) => {}
        other => panic!("EXTERNAL refused: {other:?}"),
    }
    let mut anon = b.raw(None).await;
    let start = anon.read_start().await;
    assert_eq!(
        start.mechanisms.to_string(),
        "PLAIN AMQPLAIN",
        "no certificate, no EXTERNAL"
    );
    // A certificate whose CN is no user is refused with 403.
    let mut stranger = b.raw(Some(&pki.bob)).await;
    stranger.read_start().await;
    match stranger.start_ok_with("EXTERNAL", b"").await {
        AMQPClass::Connection(ConnMethod::Close(c)) => assert_eq!(c.reply_code, ACCESS_REFUSED),
        other => panic!("expected 403, got {other:?}"),
    }
    // pika with ExternalCredentials, end to end, as alice.
    let (ok, out) = run_pika(&[
        b.amqps_port.to_string(),
        pki.ca.cert_file.display().to_string(),
        "external".into(),
        pki.alice.cert.display().to_string(),
        pki.alice.key.display().to_string(),
    ]);
    assert!(
        ok && out.contains("ok 200 200"),
        "pika EXTERNAL: {out}\n{}",
        b.broker.log()
    );
}

#[tokio::test]
async fn fail_if_no_peer_cert_refuses_a_client_without_one() {
    let pki = Pki::new();
    let b = TlsBroker::start(&pki, &pki.verify_peer_lines(true));
    let refused = b.handshake(None).await;
    // TLS 1.3: the client's handshake completes before the server checks
    // the (missing) certificate, so the refusal arrives as an alert on the
    // first read.
    let refused = match refused {
        Err(e) => Err(e),
        Ok(s) => client::first_read(s).await,
    };
    assert!(
        refused.is_err(),
        "a client without a certificate was served"
    );
    let ok = b.handshake(Some(&pki.alice)).await;
    assert!(
        ok.is_ok(),
        "a client with a certificate was refused: {ok:?}"
    );
}

#[test]
fn the_management_api_answers_over_https() {
    let pki = Pki::new();
    let https = free_port();
    let _b = TlsBroker::start(&pki, &format!("management_https_port = {https}"));
    let out = Command::new("timeout")
        .args(["20", "curl", "-sS", "--cacert"])
        .arg(&pki.ca.cert_file)
        .args(["-u", "guest:guest"])
        .arg(format!("https://localhost:{https}/api/overview"))
        .output()
        .expect("curl");
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&body).expect("overview JSON");
    assert!(
        v["listeners"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x["protocol"] == "https")),
        "{v}"
    );
    // `stablemq ctl` over HTTPS, trusting the test's CA.
    let url = format!("https://localhost:{https}");
    let ctl = |extra: &[&std::ffi::OsStr]| {
        Command::new("timeout")
            .arg("30")
            .arg(compat_tests::binary_path())
            .args(["ctl", "--url", &url])
            .args(extra)
            .args(["list_vhosts", "--formatter", "json"])
            .output()
            .expect("run stablemq ctl")
    };
    let out = ctl(&["--tls-ca-file".as_ref(), pki.ca.cert_file.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("\"/\""),
        "ctl over https: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without the CA the certificate is not trusted, and ctl says so.
    let out = ctl(&[]);
    let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(
        !out.status.success() && err.contains("certificate"),
        "ctl trusted an unknown CA: {err}"
    );
}

/// `stablemq shovel` from an AMQPS source: RabbitMQ's TLS query parameters
/// in the URI (`cacertfile`, `certfile`, `keyfile`) with SASL EXTERNAL, and
/// `--tls-ca-file` with a password; `verify=verify_none` is refused.
#[tokio::test]
async fn shovel_moves_messages_from_an_amqps_source() {
    use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
    let pki = Pki::new();
    let top = "auth_mechanisms = [\"PLAIN\", \"AMQPLAIN\", \"EXTERNAL\"]";
    let src = TlsBroker::start_top(&pki, top, &pki.verify_peer_lines(false));
    src.add_user("alice");
    let dest = compat_tests::Broker::start();
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    for b in [&src.broker, &dest] {
        let conn = connect(b).await;
        let ch = conn.create_channel().await.expect("channel");
        ch.queue_declare("shv".into(), durable, Default::default())
            .await
            .expect("declare");
    }
    let source = &src.broker;
    let fill = |n: u32| async move {
        let conn = connect(source).await;
        let ch = conn.create_channel().await.expect("channel");
        ch.confirm_select(Default::default())
            .await
            .expect("confirms");
        for i in 0..n {
            let body = i.to_string();
            ch.basic_publish(
                "".into(),
                "shv".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                Default::default(),
            )
            .await
            .expect("publish")
            .await
            .expect("confirm");
        }
    };
    let shovel = |src_uri: String, extra: &[&str]| {
        let out = Command::new("timeout")
            .arg("60")
            .arg(compat_tests::binary_path())
            .args(["shovel", "--src-uri", &src_uri, "--src-queue", "shv"])
            .args(["--dest-uri", &dest.uri(), "--exit-when-empty", "--json"])
            .args(extra)
            .output()
            .expect("run stablemq shovel");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    fill(300).await;
    let (ca, cert, key) = (
        pki.ca.cert_file.display(),
        pki.alice.cert.display(),
        pki.alice.key.display(),
    );
    let uri = format!(
        "amqps://localhost:{}/%2f?auth_mechanism=external&cacertfile={ca}&certfile={cert}&keyfile={key}",
        src.amqps_port
    );
    let (code, out) = shovel(uri, &[]);
    assert!(
        code == Some(0) && out.contains("\"moved\":300"),
        "shovel with EXTERNAL over amqps: {out}\n{}",
        src.broker.log()
    );
    fill(100).await;
    let uri = format!("amqps://guest:guest@localhost:{}/%2f", src.amqps_port);
    let ca_flag = pki.ca.cert_file.display().to_string();
    let (code, out) = shovel(uri.clone(), &["--tls-ca-file", &ca_flag]);
    assert!(
        code == Some(0) && out.contains("\"moved\":100"),
        "shovel with --tls-ca-file: {out}"
    );
    let (code, out) = shovel(format!("{uri}?verify=verify_none"), &[]);
    assert!(
        code == Some(2) && out.contains("verify_none is not supported"),
        "{out}"
    );
    // Without a CA for a private one, the handshake fails with a clear error.
    let (code, out) = shovel(uri, &[]);
    assert!(
        code == Some(1) && out.to_lowercase().contains("certificate"),
        "{out}"
    );
}

#[tokio::test]
async fn sighup_reloads_the_certificate_and_open_connections_stay_up() {
    let pki = Pki::new();
    let b = TlsBroker::start(&pki, "");
    let before = b.fingerprint_seen().await;
    // A TLS connection opened before the reload.
    let mut old = b.raw(None).await;
    old.read_start().await;
    let tune = old.start_ok("guest", "guest").await;
    old.tune_ok_and_open(tune.channel_max, tune.frame_max, 0, "/")
        .await;
    // New certificate files in place of the old ones, then SIGHUP.
    pki.replace_server_cert("second");
    let status = Command::new("kill")
        .args(["-HUP", &b.broker.pid().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(status.success());
    let after = within("the new certificate", async {
        loop {
            let fp = b.fingerprint_seen().await;
            if fp != before {
                return fp;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_ne!(before, after);
    assert_eq!(b.api_get("/api/stablemq/tls/certificate")["sha256"], after);
    // The connection from before the reload still works: it opens a channel.
    old.send_method(1, 20, 10, &[0]).await;
    match old.read_method().await {
        (1, AMQPClass::Channel(lapin::protocol::channel::AMQPMethod::OpenOk(_))) => {}
        other => panic!("expected channel.open-ok on the old connection, got {other:?}"),
    }
    // A bad file: the reload fails and the current certificate stays.
    std::fs::write(&pki.server.cert, "not a certificate").expect("break cert");
    let (code, body) = b.api_post("/api/stablemq/tls/reload");
    assert_eq!(code, 400, "{body}");
    assert_eq!(b.fingerprint_seen().await, after);
}

#[test]
fn perf_publishes_confirms_and_consumes_over_amqps() {
    let pki = Pki::new();
    let b = TlsBroker::start(&pki, "");
    let uri = format!("amqps://guest:guest@localhost:{}/%2f", b.amqps_port);
    let out = Command::new(compat_tests::binary_path())
        .args(["perf", "--uri", &uri, "--tls-ca-file"])
        .arg(&pki.ca.cert_file)
        .args([
            "-x", "1", "-y", "1", "-s", "1000", "-c", "100", "-C", "3000",
        ])
        .args([
            "--persistent",
            "-u",
            "perf-tls",
            "--json",
            "--timeout",
            "120",
        ])
        .output()
        .expect("run stablemq perf");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "perf over amqps failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("perf JSON");
    assert_eq!(v["published"], 3000, "{v}");
    assert_eq!(v["confirmed"], 3000, "{v}");
    assert_eq!(v["consumed"], 3000, "{v}");
    // Without the CA the broker's certificate is not trusted: a clear error.
    let out = Command::new(compat_tests::binary_path())
        .args(["perf", "--uri", &uri, "-x", "1", "-y", "0", "-C", "1"])
        .args(["--timeout", "20"])
        .output()
        .expect("run stablemq perf");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("--tls-ca-file"), "{text}");
}

/// `--amqp-port 0`: AMQPS only. The node serves TLS clients and binds no
/// plain AMQP listener.
#[tokio::test]
async fn amqp_port_zero_serves_amqps_only() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("dir");
    let amqps = free_port();
    let log_path = dir.path().join("broker.log");
    let log = std::fs::File::create(&log_path).expect("log");
    let mut child = Command::new(compat_tests::binary_path())
        .args(["serve", "--bind", "127.0.0.1", "--amqp-port", "0"])
        .args(["--prometheus-port", "0", "--management-port", "0"])
        .arg("--amqps-port")
        .arg(amqps.to_string())
        .arg("--tls-cert-file")
        .arg(&pki.server.cert)
        .arg("--tls-key-file")
        .arg(&pki.server.key)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn");
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = Kill(&mut child);
    let target = client::TlsTarget::new(&pki.ca.cert_file, amqps);
    let mut raw = within("the AMQPS listener", async {
        loop {
            if let Ok(s) = target.handshake(None).await {
                return RawConn::over(s).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    raw.read_start().await;
    let text = std::fs::read_to_string(&log_path).expect("log");
    assert!(text.contains("AMQPS listening on 127.0.0.1"), "{text}");
    assert!(!text.contains("AMQP listening on"), "{text}");
    // And without [tls], --amqp-port 0 is refused at once with a reason.
    let out = Command::new("timeout")
        .arg("20")
        .arg(compat_tests::binary_path())
        .args(["serve", "--bind", "127.0.0.1", "--amqp-port", "0"])
        .args([
            "--prometheus-port",
            "0",
            "--management-port",
            "0",
            "--data-dir",
        ])
        .arg(dir.path().join("data2"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--amqp-port 0 needs [tls]"), "{err}");
}
