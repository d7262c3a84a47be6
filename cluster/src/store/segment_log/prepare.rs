//! Zero-filling the next segment file ahead of time, on a thread of its own.
//!
//! Why: an append into a sparse file makes its commit's `fdatasync` allocate
//! blocks too, metadata the filesystem writes beside the data (with work in
//! its kernel threads). Measured on this project's 2-core VM (ext4), a 7 KB
//! append plus `fdatasync`: 290–410 µs into a sparse file, 150–190 µs into a
//! zeroed one, at about half the CPU. A busy co-located cluster spends most
//! of a core on its commits (S5), so this is latency twice over. Reusing
//! compacted files (the spare, see `files`) covers a log in steady state; a
//! growing log (a fresh store, a backlog filling) has none. So once the
//! current segment is a quarter full, and no file is waiting to be reused,
//! the next one is written full of zeros in the background. A segment
//! needed before its zero-fill is done is allocated with `fallocate`
//! instead (`files::allocate`): not as good (each commit then converts
//! its extent, a metadata write), but never sparse.
//!
//! The file is written under [`PREPARING`] and renamed to [`PREPARED`] when
//! whole and synced; opening a log removes a leftover [`PREPARING`]. What a
//! prepared file holds never matters: a segment's records carry its nonce,
//! and zeros read as the end of a segment.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A zeroed file waiting to become the next segment; not a segment name.
pub(super) const PREPARED: &str = "prepared.seg.free";
/// [`PREPARED`] while it is being written.
pub(super) const PREPARING: &str = "prepared.seg.tmp";
/// Written, then synced, per step: the commits that share the disk wait
/// behind one step's flush at most, not behind the whole file's. With 1 MiB
/// steps and 5 ms pauses, S5 (10k msg/s, 3 co-located stores filling their
/// segments together) showed slow messages in bursts every 10 ms for the
/// ~300 ms of each zero-fill; with 128 KiB steps they were gone.
const STEP_BYTES: u64 = 128 * 1024;
/// Pause between steps, for the same reason: about 40 MB/s, so a 32 MiB
/// file takes about 0.9 s, while the three quarters of a segment left take
/// about 2 s at 10k msg/s of 1 KB.
const STEP_PAUSE: Duration = Duration::from_millis(3);

/// A zero-fill in progress (or done); dropping it stops and joins it.
pub(super) struct Preparer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl Preparer {
    /// Start writing a zeroed `cap`-byte file in `dir`.
    pub(super) fn start(dir: &Path, cap: u64) -> std::io::Result<Preparer> {
        let stop = Arc::new(AtomicBool::new(false));
        let dir = dir.to_path_buf();
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("stablemq-seg-prep".into())
            .spawn(move || zero_fill(&dir, cap, &flag))?;
        Ok(Preparer {
            stop,
            thread: Some(thread),
        })
    }

    /// Whether the thread is done (the file is in place, unless it failed).
    pub(super) fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Wait for the thread; its error, if it failed (the log then just
    /// goes on with files allocated by `fallocate`).
    pub(super) fn join(mut self) -> std::io::Result<()> {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(std::io::Error::other("the segment preparer panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for Preparer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn zero_fill(dir: &Path, cap: u64, stop: &AtomicBool) -> std::io::Result<()> {
    let tmp: PathBuf = dir.join(PREPARING);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    let mut at = 0;
    while at < cap {
        if stop.load(Ordering::Relaxed) {
            drop(file);
            return std::fs::remove_file(&tmp);
        }
        let step = STEP_BYTES.min(cap - at);
        super::files::write_zeros(&file, at, at + step)?;
        file.sync_data()?;
        at += step;
        if at < cap {
            std::thread::sleep(STEP_PAUSE);
        }
    }
    // The size and the allocation too, so that the first commit into it
    // has no metadata to write either.
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(PREPARED))
}
