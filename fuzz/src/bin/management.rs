//! afl target: the management API's request bodies
//! (`stablemq::fuzz::management_bodies`).
fn main() {
    afl::fuzz!(|data: &[u8]| stablemq::fuzz::management_bodies(data));
}
