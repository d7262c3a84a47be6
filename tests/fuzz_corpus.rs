//! Replays the fuzz corpora of the broker's decoders (`fuzz/corpus/`
//! `connection`, `definitions`, `management`: seeds and the inputs afl
//! kept) and every crash afl found (`fuzz/regressions/...`) through the fuzz
//! targets' own checks in `stablemq::fuzz`. A crash fixed stays fixed: its
//! input is replayed here on every test run. The definitions target also
//! gets the real RabbitMQ export in compat-tests/fixtures.

use std::path::PathBuf;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut out = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for e in entries {
            let path = e.expect("a corpus entry").path();
            let data = std::fs::read(&path).expect("a readable corpus file");
            out.push((path, data));
        }
    }
    out
}

#[test]
fn the_connection_corpus_and_every_crash_found_run_without_a_panic() {
    let inputs = inputs("connection");
    assert!(inputs.len() >= 5, "the seed corpus is missing");
    for (path, data) in inputs {
        eprintln!("{}", path.display());
        stablemq::fuzz::connection(&data);
    }
}

#[test]
fn the_definitions_corpus_and_every_crash_found_parse_without_a_panic() {
    let mut inputs = inputs("definitions");
    assert!(inputs.len() >= 3, "the seed corpus is missing");
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("compat-tests/fixtures/rabbitmq-3.10-definitions.json");
    inputs.push((fixture.clone(), std::fs::read(&fixture).unwrap()));
    for (path, data) in inputs {
        eprintln!("{}", path.display());
        stablemq::fuzz::definitions(&data);
    }
}

#[test]
fn the_management_corpus_and_every_crash_found_parse_without_a_panic() {
    let inputs = inputs("management");
    assert!(inputs.len() >= 5, "the seed corpus is missing");
    for (path, data) in inputs {
        eprintln!("{}", path.display());
        stablemq::fuzz::management_bodies(&data);
    }
}
