//! afl target: the definitions import, JSON into events
//! (`stablemq::fuzz::definitions`).
fn main() {
    afl::fuzz!(|data: &[u8]| stablemq::fuzz::definitions(data));
}
