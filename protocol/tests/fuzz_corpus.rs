//! Replays the frame decoder's fuzz corpus (`fuzz/corpus/frames`: seeds and
//! the inputs afl kept) and every crash afl found (`fuzz/regressions/frames`)
//! through the fuzz target's own checks, `stablemq_protocol::fuzz::frames`.
//! A crash fixed stays fixed: its input is replayed here on every test run.

use std::path::PathBuf;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
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
fn the_frame_corpus_and_every_crash_found_decode_without_a_panic() {
    let inputs = inputs("frames");
    assert!(inputs.len() >= 5, "the seed corpus is missing");
    for (path, data) in inputs {
        eprintln!("{}", path.display());
        stablemq_protocol::fuzz::frames(&data);
    }
}
