//! afl target: the connection state machine driven by a client's bytes
//! (`stablemq::fuzz::connection`).
fn main() {
    afl::fuzz!(|data: &[u8]| stablemq::fuzz::connection(data));
}
