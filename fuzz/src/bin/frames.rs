//! afl target: the AMQP frame decoder over a byte stream
//! (`stablemq_protocol::fuzz::frames`).
fn main() {
    afl::fuzz!(|data: &[u8]| stablemq_protocol::fuzz::frames(data));
}
