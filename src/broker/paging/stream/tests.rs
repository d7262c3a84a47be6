use super::*;
use crate::broker::paging::tests::{files_in, msg, view};

/// A stream of `n` entries of `len` bytes, ids from 1, through a pager of
/// `budget` bytes in a directory of the test's own.
fn stream(n: u64, len: usize, budget: u64) -> (tempfile::TempDir, Arc<Pager>, StreamEntries) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let pager = Pager::open(dir.path(), budget).expect("a pager");
    let mut s = StreamEntries::new(Some(pager.clone()));
    for id in 1..=n {
        assert_eq!(s.push(msg(id, 0, len)), id - 1);
    }
    (dir, pager, s)
}

fn read_all(s: &StreamEntries, from: u64, max: usize) -> Vec<(u64, u64)> {
    let mut seen = Vec::new();
    s.visit_from(from, max, |off, m| {
        seen.push((off, m.msg.id));
        true
    });
    seen
}

/// (body length, id) of `[from, to)` in one walk.
fn metas(s: &StreamEntries, from: u64, to: u64) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    s.visit_meta(from, to, |len, id| v.push((len, id)));
    v
}

#[test]
fn a_stream_over_its_window_pages_out_and_reads_back_every_offset() {
    let (dir, pager, s) = stream(5000, 1024, 256 * 1024);
    assert_eq!(s.len(), 5000);
    assert!(s.paged_len() > 4000, "paged {}", s.paged_len());
    assert!(pager.used() <= pager.budget(), "RAM {}", pager.used());
    assert!(files_in(dir.path()) > 0, "nothing was written");
    for off in [0u64, 1, 2000, 4095, 4096, 4097, 4999] {
        let m = s.get(off).expect("every kept offset reads");
        assert_eq!(view(&m), view(&msg(off + 1, 0, 1024)), "offset {off}");
    }
    assert!(s.get(5000).is_none());
    // One visit crosses the disk/RAM boundary with consecutive offsets.
    let seen = read_all(&s, 10, usize::MAX);
    assert_eq!(seen.len(), 4990);
    assert!(seen.iter().all(|&(off, id)| id == off + 1));
    assert_eq!(read_all(&s, 100, 7).len(), 7, "max bounds a visit");
}

#[test]
fn a_visit_stops_when_told_and_reads_only_what_it_needs() {
    let (_dir, _pager, s) = stream(3000, 512, 128 * 1024);
    let mut n = 0;
    s.visit_from(0, usize::MAX, |_, _| {
        n += 1;
        n < 3
    });
    assert_eq!(n, 3);
    assert_eq!(s.meta(5), Some((512, 6)), "meta comes from the index");
}

#[test]
fn truncation_drops_the_files_behind_the_first_offset() {
    let (dir, pager, mut s) = stream(20_000, 4096, 64 * 1024);
    let before = files_in(dir.path());
    assert!(before >= 2, "{before} files");
    s.truncate_to(17_000);
    assert_eq!((s.first_offset(), s.next_offset()), (17_000, 20_000));
    assert!(files_in(dir.path()) < before, "no file was deleted");
    assert_eq!(s.get(17_000).map(|m| m.msg.id), Some(17_001));
    assert!(s.get(16_999).is_none());
    // Past the end: empty, and the next offset moves there.
    s.truncate_to(25_000);
    assert_eq!((s.len(), s.next_offset()), (0, 25_000));
    assert_eq!(files_in(dir.path()), 0, "an emptied stream keeps no file");
    assert_eq!(s.push(msg(30_000, 0, 10)), 25_000);
    drop(s);
    assert_eq!(pager.used(), 0, "a dropped stream gives its RAM back");
}

/// Random pushes, truncations and reads on a paged stream and on one held
/// in RAM give the same entries at the same offsets (I4).
#[test]
fn paged_and_unpaged_streams_read_alike() {
    let (_dir, _pager, mut paged) = stream(0, 0, 32 * 1024);
    let mut ram = StreamEntries::new(None);
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut id = 0;
    for _ in 0..20_000 {
        match next() % 100 {
            0 => {
                let to = paged.first_offset() + next() % 200;
                paged.truncate_to(to);
                ram.truncate_to(to);
            }
            1..=10 => {
                let at = paged.first_offset() + next() % (paged.len() as u64 + 2);
                let max = (next() % 50) as usize;
                assert_eq!(read_all(&paged, at, max), read_all(&ram, at, max));
                let to = at + next() % 9000;
                assert_eq!(metas(&paged, at, to), metas(&ram, at, to));
                let one_by_one: Vec<_> = (at..to).filter_map(|o| paged.meta(o)).collect();
                assert_eq!(metas(&paged, at, to), one_by_one);
            }
            _ => {
                id += 1;
                let len = (next() % 700) as usize;
                assert_eq!(paged.push(msg(id, 0, len)), ram.push(msg(id, 0, len)));
            }
        }
        assert_eq!(
            (paged.first_offset(), paged.next_offset()),
            (ram.first_offset(), ram.next_offset())
        );
    }
    assert!(paged.paged_len() > 0, "the test never paged");
    let all = |s: &StreamEntries| {
        let mut v = Vec::new();
        s.visit_from(0, usize::MAX, |off, m| {
            v.push((off, view(m)));
            true
        });
        v
    };
    assert_eq!(all(&paged), all(&ram));
}
