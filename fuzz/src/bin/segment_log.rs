//! afl target: crash recovery of the event log's segment files
//! (`stablemq_cluster::fuzz::segment_log`), each input in a fresh directory
//! on a tmpfs (/dev/shm) where there is one, so fsyncs cost nothing.
fn main() {
    let base = std::path::Path::new("/dev/shm");
    afl::fuzz!(|data: &[u8]| {
        let dir = if base.is_dir() {
            tempfile::tempdir_in(base)
        } else {
            tempfile::tempdir()
        };
        let dir = dir.expect("a temporary directory for the log");
        stablemq_cluster::fuzz::segment_log(dir.path(), data);
    });
}
