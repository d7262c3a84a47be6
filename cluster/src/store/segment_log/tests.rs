use std::fs::OpenOptions;
use std::path::Path;

use super::files::{list, segment_path};
use super::*;
use crate::store::fjall_log::tests::entries;

/// Small segments, so that a few entries roll over.
const SMALL: u64 = 300;

fn open(dir: &Path) -> SegmentLog {
    SegmentLog::open(dir, LogPosition::ZERO, SMALL).unwrap()
}

fn seg_file(dir: &Path, seq: u64) -> PathBuf {
    segment_path(dir, seq)
}

fn files(dir: &Path) -> Vec<u64> {
    list(dir).unwrap()
}

#[test]
fn appends_survive_a_reopen_and_read_back_in_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let written = entries(1, 1..=40);
    {
        let mut log = open(dir.path());
        for run in written.chunks(3) {
            log.append(run).unwrap();
        }
        log.set_stable(30).unwrap();
        log.sync().unwrap();
        assert!(log.segment_count() > 3, "rolled over");
    }
    let log = open(dir.path());
    assert_eq!(log.last(), LogPosition::new(1, 40));
    assert_eq!(log.stable(), 30);
    assert_eq!(log.read_range(1, 40).unwrap(), written);
    assert_eq!(log.read_range(17, 23).unwrap(), written[16..23].to_vec());
    assert_eq!(log.position(25).unwrap(), LogPosition::new(1, 25));
    assert_eq!(log.read_range(41, 50).unwrap(), Vec::new());
}

/// A record that a crash cut short is cut off on open, with everything
/// after it, and the log goes on from the record before it.
#[test]
fn a_torn_tail_is_cut_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let end_of_two;
    {
        let mut log = SegmentLog::open(dir.path(), LogPosition::ZERO, SEGMENT_BYTES).unwrap();
        log.append(&entries(1, 1..=2)).unwrap();
        end_of_two = log.current().end;
        log.append(&entries(1, 3..=4)).unwrap();
        log.sync().unwrap();
    }
    let path = seg_file(dir.path(), 1);
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    // The second record's last bytes never reached the disk.
    file.write_all_at(&[0; 3], end_of_two + RECORD_HEADER as u64 + 14)
        .unwrap();
    drop(file);
    let mut log = SegmentLog::open(dir.path(), LogPosition::ZERO, SEGMENT_BYTES).unwrap();
    assert_eq!(log.last(), LogPosition::new(1, 2));
    assert_eq!(log.read_range(1, 9).unwrap(), entries(1, 1..=2));
    // Zeroed from the cut on: what is appended now reads back alone.
    log.append(&entries(2, 3..=3)).unwrap();
    log.sync().unwrap();
    drop(log);
    let log = SegmentLog::open(dir.path(), LogPosition::ZERO, SEGMENT_BYTES).unwrap();
    let mut expected = entries(1, 1..=2);
    expected.extend(entries(2, 3..=3));
    assert_eq!(log.read_range(1, 9).unwrap(), expected);
}

/// Valid records can lie behind the end of the newest segment (a write whose
/// first page was lost and whose later one reached the disk). Open zeroes
/// the file from the end on, so the next append, which overwrites the end,
/// never brings them back (found by afl: `fuzz/regressions/segment_log/`).
#[test]
fn records_behind_the_end_are_zeroed_on_open_so_an_append_never_revives_them() {
    let dir = tempfile::tempdir().unwrap();
    let (end_of_one, end_of_two);
    {
        let mut log = SegmentLog::open(dir.path(), LogPosition::ZERO, SEGMENT_BYTES).unwrap();
        log.append(&entries(1, 1..=2)).unwrap();
        end_of_one = log.current().end;
        log.append(&entries(1, 3..=4)).unwrap();
        end_of_two = log.current().end;
        log.append(&entries(1, 5..=6)).unwrap();
        log.sync().unwrap();
    }
    let path = seg_file(dir.path(), 1);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // The second record's header never reached the disk; the third did.
    file.write_all_at(&[0; RECORD_HEADER], end_of_one).unwrap();
    let mut log = SegmentLog::open(dir.path(), LogPosition::ZERO, SEGMENT_BYTES).unwrap();
    assert_eq!(log.last(), LogPosition::new(1, 2));
    let mut behind = vec![1u8; (end_of_two - end_of_one) as usize + 64];
    file.read_exact_at(&mut behind, end_of_one).unwrap();
    assert!(behind.iter().all(|&b| b == 0), "zeroed behind the end");
    assert!(allocated(&path) >= SEGMENT_BYTES, "and still allocated");
    // An append of the same size ends where the third record began.
    log.append(&entries(2, 3..=4)).unwrap();
    assert_eq!(log.current().end, end_of_two);
    log.sync().unwrap();
    drop(log);
    let log = SegmentLog::open(dir.path(), LogPosition::ZERO, SEGMENT_BYTES).unwrap();
    let mut expected = entries(1, 1..=2);
    expected.extend(entries(2, 3..=4));
    assert_eq!(log.read_range(1, 9).unwrap(), expected);
    assert_eq!(log.last(), LogPosition::new(2, 4));
}

/// A CRC mismatch in the newest segment is a torn tail (cut), in an older
/// one (synced before the next began) corruption (refused).
#[test]
fn a_crc_mismatch_is_cut_at_the_tail_and_refused_before_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path());
        for i in 1..=30 {
            log.append(&entries(1, i..=i)).unwrap();
        }
        log.sync().unwrap();
    }
    let seqs = files(dir.path());
    assert!(seqs.len() >= 3);
    let newest = seg_file(dir.path(), seqs[seqs.len() - 1]);
    let mut bytes = std::fs::read(&newest).unwrap();
    let flip = rec::SEGMENT_HEADER + RECORD_HEADER + 1;
    bytes[flip] ^= 0x40;
    std::fs::write(&newest, &bytes).unwrap();
    let log = open(dir.path());
    let cut_at = log.last().index;
    assert!(cut_at < 30);
    assert_eq!(log.read_range(1, 30).unwrap(), entries(1, 1..=cut_at));
    drop(log);
    let older = seg_file(dir.path(), seqs[0]);
    let mut bytes = std::fs::read(&older).unwrap();
    bytes[flip] ^= 0x40;
    std::fs::write(&older, &bytes).unwrap();
    assert!(matches!(
        SegmentLog::open(dir.path(), LogPosition::ZERO, SMALL),
        Err(StoreError::Corrupt(_))
    ));
}

/// Truncation is a marker; what follows it, across a restart, is the new
/// suffix only, and positions answer for the new entries, not the old.
#[test]
fn truncate_then_append_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path());
        for run in entries(1, 1..=20).chunks(4) {
            log.append(run).unwrap();
        }
        log.truncate_after(6).unwrap();
        assert_eq!(log.last(), LogPosition::new(1, 6));
        log.append(&entries(2, 7..=12)).unwrap();
        assert_eq!(log.position(10).unwrap(), LogPosition::new(2, 10));
        log.truncate_after(8).unwrap();
        log.append(&entries(3, 9..=9)).unwrap();
        log.sync().unwrap();
    }
    let log = open(dir.path());
    let mut expected = entries(1, 1..=6);
    expected.extend(entries(2, 7..=8));
    expected.extend(entries(3, 9..=9));
    assert_eq!(log.read_range(1, 99).unwrap(), expected);
    assert_eq!(log.last(), LogPosition::new(3, 9));
    assert_eq!(log.position(8).unwrap(), LogPosition::new(2, 8));
    assert_eq!(log.position(6).unwrap(), LogPosition::new(1, 6));
    // To empty, then again.
    drop(log);
    let mut log = open(dir.path());
    log.truncate_after(0).unwrap();
    assert_eq!(log.last(), LogPosition::ZERO);
    drop(log);
    let log = open(dir.path());
    assert_eq!(log.last(), LogPosition::ZERO);
    assert!(log.read_range(1, 99).unwrap().is_empty());
}

/// Compaction deletes whole files below the base, never the current one
/// nor one still holding an entry above the base, and a reopen after it
/// starts the log at the first file kept.
#[test]
fn compaction_drops_whole_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    for i in 1..=30 {
        log.append(&entries(1, i..=i)).unwrap();
    }
    log.sync().unwrap();
    let before = files(dir.path());
    let second_starts = log.segments[1].prev.index;
    assert!(!log.reclaimable(second_starts - 1));
    log.drop_through(second_starts - 1).unwrap();
    assert_eq!(files(dir.path()), before);
    let base = LogPosition::new(1, 25);
    log.set_base(base);
    log.drop_through(25).unwrap();
    let after = files(dir.path());
    assert!(after.len() < before.len());
    assert!(log.start().index <= 25);
    assert_eq!(log.read_range(26, 30).unwrap(), entries(1, 26..=30));
    drop(log);
    let log = SegmentLog::open(dir.path(), base, SMALL).unwrap();
    assert_eq!(log.start(), log.segments[0].prev);
    assert_eq!(log.read_range(26, 30).unwrap(), entries(1, 26..=30));
    assert_eq!(log.position(25).unwrap(), base);
    // Everything below the base: only the current file stays.
    let mut log = log;
    log.set_base(LogPosition::new(1, 30));
    log.drop_through(30).unwrap();
    assert_eq!(files(dir.path()).len(), 1);
}

/// A truncation followed by compaction of the segments it cut into: the
/// log reopens from the files left.
#[test]
fn truncated_segments_are_compacted_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    for i in 1..=20 {
        log.append(&entries(1, i..=i)).unwrap();
    }
    log.truncate_after(5).unwrap();
    log.append(&entries(2, 6..=25)).unwrap();
    log.sync().unwrap();
    let base = LogPosition::new(2, 24);
    log.set_base(base);
    log.drop_through(24).unwrap();
    drop(log);
    let log = SegmentLog::open(dir.path(), base, SMALL).unwrap();
    assert_eq!(log.last(), LogPosition::new(2, 25));
    assert_eq!(log.read_range(25, 25).unwrap(), entries(2, 25..=25));
}

/// `reset` leaves one empty segment starting at the new base.
#[test]
fn reset_starts_over_at_a_base() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    for i in 1..=20 {
        log.append(&entries(1, i..=i)).unwrap();
    }
    log.set_stable(3).unwrap();
    let base = LogPosition::new(4, 100);
    log.reset(base).unwrap();
    assert_eq!(files(dir.path()).len(), 1);
    assert_eq!(log.last(), base);
    log.append(&entries(4, 101..=101)).unwrap();
    log.sync().unwrap();
    drop(log);
    let log = SegmentLog::open(dir.path(), base, SMALL).unwrap();
    assert_eq!(log.start(), base);
    assert_eq!(log.last(), LogPosition::new(4, 101));
    assert_eq!(log.stable(), 3);
    assert_eq!(log.position(100).unwrap(), base);
}

/// A record bigger than a segment gets a segment of its own.
#[test]
fn a_record_bigger_than_a_segment_fits_one_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let big = vec![Entry::new(1, 1, vec![7u8; 4 * SMALL as usize])];
    {
        let mut log = open(dir.path());
        log.append(&big).unwrap();
        log.append(&entries(1, 2..=2)).unwrap();
        log.sync().unwrap();
    }
    let log = open(dir.path());
    let mut expected = big;
    expected.extend(entries(1, 2..=2));
    assert_eq!(log.read_range(1, 2).unwrap(), expected);
}

/// A crash while a segment was being created leaves a file without a
/// (whole) header: it is removed and the log ends where it did before.
#[test]
fn a_segment_whose_creation_was_cut_short_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path());
        log.append(&entries(1, 1..=3)).unwrap();
        log.sync().unwrap();
    }
    std::fs::write(seg_file(dir.path(), 2), [0u8; 10]).unwrap();
    let mut log = open(dir.path());
    assert_eq!(files(dir.path()), vec![1]);
    assert_eq!(log.read_range(1, 9).unwrap(), entries(1, 1..=3));
    log.append(&entries(1, 4..=40)).unwrap();
    log.sync().unwrap();
    drop(log);
    // A whole header that does not check out is damage: refused.
    let last = *files(dir.path()).last().unwrap();
    let mut bytes = std::fs::read(seg_file(dir.path(), last)).unwrap();
    bytes[20] ^= 1;
    std::fs::write(seg_file(dir.path(), last), bytes).unwrap();
    assert!(matches!(
        SegmentLog::open(dir.path(), LogPosition::ZERO, SMALL),
        Err(StoreError::Corrupt(_))
    ));
}

/// A compacted file is reused as the next segment, and what it held before
/// never reads as records of its new life.
#[test]
fn a_compacted_file_is_reused_and_its_old_records_stay_dead() {
    let dir = tempfile::tempdir().unwrap();
    let spare = dir.path().join(SPARE);
    let mut log = open(dir.path());
    for i in 1..=30 {
        log.append(&entries(1, i..=i)).unwrap();
    }
    log.sync().unwrap();
    let base = LogPosition::new(1, 25);
    log.set_base(base);
    log.drop_through(25).unwrap();
    assert!(spare.exists());
    for i in 31..=45 {
        log.append(&entries(1, i..=i)).unwrap();
    }
    log.sync().unwrap();
    assert!(!spare.exists(), "the spare became a segment");
    drop(log);
    let log = SegmentLog::open(dir.path(), base, SMALL).unwrap();
    assert_eq!(log.last(), LogPosition::new(1, 45));
    assert_eq!(log.read_range(26, 99).unwrap(), entries(1, 26..=45));
    // A log started from nothing never takes a spare it finds.
    drop(log);
    let other = tempfile::tempdir().unwrap();
    std::fs::copy(
        seg_file(dir.path(), 1 + files(dir.path())[0]),
        other.path().join(SPARE),
    )
    .unwrap();
    let log = open(other.path());
    assert!(!other.path().join(SPARE).exists());
    assert_eq!(log.last(), LogPosition::ZERO);
}

fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// Once the current segment is a quarter full (and no compacted file
/// waits), the next one is written full of zeros in the background, and the
/// rollover takes it. A segment made without one (the first) has its
/// blocks allocated up front (`fallocate`): neither is sparse.
#[test]
fn the_next_segment_is_zero_filled_ahead_and_taken_at_the_rollover() {
    const CAP: u64 = 64 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let prepared = dir.path().join(prepare::PREPARED);
    let mut log = SegmentLog::open(dir.path(), LogPosition::ZERO, CAP).unwrap();
    assert!(allocated(&seg_file(dir.path(), 1)) >= CAP);
    assert!(!prepared.exists(), "nothing to prepare for yet");
    let big = |i: u64| Entry::new(1, i, vec![i as u8; 1000]);
    let mut i = 0;
    while log.current().end * 2 < CAP {
        i += 1;
        log.append(&[big(i)]).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !prepared.exists() {
        assert!(std::time::Instant::now() < deadline, "nothing was prepared");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(std::fs::metadata(&prepared).unwrap().len(), CAP);
    assert!(allocated(&prepared) >= CAP);
    while log.segment_count() == 1 {
        i += 1;
        log.append(&[big(i)]).unwrap();
    }
    log.sync().unwrap();
    assert!(!prepared.exists(), "the prepared file became segment 2");
    assert!(allocated(&seg_file(dir.path(), 2)) >= CAP);
    drop(log);
    let log = SegmentLog::open(dir.path(), LogPosition::ZERO, CAP).unwrap();
    assert_eq!(log.last(), LogPosition::new(1, i));
    assert_eq!(
        log.read_range(1, i).unwrap(),
        (1..=i).map(big).collect::<Vec<_>>()
    );
}

/// A zero-fill a crash cut short is removed on open; a finished one waits
/// to be used.
#[test]
fn open_removes_an_unfinished_zero_fill_and_keeps_a_finished_one() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    let preparing = dir.path().join(prepare::PREPARING);
    std::fs::write(&preparing, b"half").unwrap();
    let log = open(dir.path());
    assert!(!preparing.exists());
    assert!(!log.has_prepared);
    drop(log);
    std::fs::write(
        dir.path().join(prepare::PREPARED),
        vec![0u8; SMALL as usize],
    )
    .unwrap();
    let log = open(dir.path());
    assert!(log.has_prepared);
}

/// Records wait in memory until the sync writes them in one go: reads see
/// them before that, a truncation cuts them, and a log dropped unsynced
/// writes them out (the store promises a reopened store everything it was
/// given).
#[test]
fn unsynced_records_read_back_truncate_and_survive_a_drop() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = SegmentLog::open(dir.path(), LogPosition::ZERO, SEGMENT_BYTES).unwrap();
    log.append(&entries(1, 1..=3)).unwrap();
    log.sync().unwrap();
    let on_disk = std::fs::read(seg_file(dir.path(), 1)).unwrap();
    log.append(&entries(1, 4..=9)).unwrap();
    log.set_stable(3).unwrap();
    // Nothing written yet: the file is as the sync left it.
    assert_eq!(std::fs::read(seg_file(dir.path(), 1)).unwrap(), on_disk);
    assert_eq!(log.read_range(2, 9).unwrap(), entries(1, 2..=9));
    assert_eq!(log.position(7).unwrap(), LogPosition::new(1, 7));
    log.truncate_after(6).unwrap();
    assert_eq!(log.last(), LogPosition::new(1, 6));
    log.append(&entries(2, 7..=8)).unwrap();
    drop(log);
    let log = SegmentLog::open(dir.path(), LogPosition::ZERO, SEGMENT_BYTES).unwrap();
    assert_eq!(log.last(), LogPosition::new(2, 8));
    let mut want = entries(1, 1..=6);
    want.extend(entries(2, 7..=8));
    assert_eq!(log.read_range(1, 9).unwrap(), want);
    assert_eq!(log.stable(), 3);
}

/// A commit goes only into written extents: where a segment's blocks are
/// allocated but unwritten (`fallocate`, the first segment), zeros are
/// written and synced ahead of the commits, a step at a time, so that no
/// commit's fdatasync depends on an extent conversion (which ext4 can lose
/// without failing the fdatasync; see `SegmentLog::zero_ahead`). On a
/// filesystem with no extent map (tmpfs) there is nothing to convert, and
/// nothing to check.
#[test]
fn commits_go_into_written_extents_zero_filled_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = SegmentLog::open(dir.path(), LogPosition::ZERO, SEGMENT_BYTES).unwrap();
    let first = |log: &SegmentLog| files::written_prefix(&log.current().file).unwrap();
    let Some(before) = first(&log) else {
        eprintln!(
            "no extent map on {}: nothing to check",
            dir.path().display()
        );
        return;
    };
    assert!(before < files::ZERO_AHEAD, "fallocate left it unwritten");
    let big = |i: u64| Entry::new(1, i, vec![i as u8; 64 * 1024]);
    log.append(&[big(1)]).unwrap();
    log.sync().unwrap();
    let step = first(&log).unwrap();
    assert!(
        step >= files::ZERO_AHEAD,
        "zero-filled one step ahead: {step}"
    );
    assert!(step < SEGMENT_BYTES, "not the whole file at once: {step}");
    // Commits within the step write no zeros; the one past it writes the
    // next step.
    let mut i = 1;
    while log.current().end <= step {
        i += 1;
        log.append(&[big(i)]).unwrap();
        log.sync().unwrap();
        if log.current().end <= step {
            assert_eq!(first(&log).unwrap(), step);
        }
    }
    assert!(first(&log).unwrap() >= log.current().end);
    drop(log);
    let log = SegmentLog::open(dir.path(), LogPosition::ZERO, SEGMENT_BYTES).unwrap();
    assert_eq!(log.last(), LogPosition::new(1, i));
}
