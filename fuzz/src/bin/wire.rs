//! afl target: the node-to-node frame decoder over a byte stream
//! (`stablemq_cluster::fuzz::wire`).
fn main() {
    afl::fuzz!(|data: &[u8]| stablemq_cluster::fuzz::wire(data));
}
