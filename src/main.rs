/// mimalloc rather than glibc malloc: messages are allocated on one tokio
/// worker and freed on another, which glibc serves with arena locks (a
/// profile of the publish/deliver path showed ~8% of the broker's time in
/// malloc's futex); mimalloc frees across threads without a lock.
///
/// The `system-allocator` feature leaves it out, for heap profilers.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's options, set before anything else runs.
#[cfg(not(feature = "system-allocator"))]
mod tuning {
    /// mimalloc v3's `mi_option_purge_delay` (its place in `mi_option_e`).
    const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
    /// How long freed memory stays committed before mimalloc returns it to the
    /// OS. mimalloc's default (1 s) is shorter than the life of a store's
    /// memtables and reduce windows (8 MiB each, refilled every second or so at
    /// 10k msg/s), so their memory went back to the OS and was faulted in (and
    /// zeroed, often as 2 MiB huge pages) again: at a fixed 10k msg/s on the
    /// 3-node cluster, 150-260 minor faults per 1000 messages per process, and
    /// `clear_page_erms` was the top kernel symbol. With 10 s the faults drop by
    /// about 85% once warm, while an idle broker still gives memory back.
    const PURGE_DELAY_MS: std::ffi::c_long = 10_000;

    /// mimalloc v3's `mi_option_allow_thp` (its place in `mi_option_e`).
    const MI_OPTION_ALLOW_THP: std::ffi::c_int = 43;

    #[allow(
        unsafe_code,
        reason = "mimalloc's C API has no Rust binding in the mimalloc crate"
    )]
    unsafe extern "C" {
        /// From the mimalloc library the allocator above links in.
        fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    }

    /// No transparent huge pages for this process. mimalloc asks for them
    /// (`MADV_HUGEPAGE`) on its arenas, so every large buffer that grows (a
    /// frame being read or encoded, a store batch, a reduce window, fjall's
    /// table writers) faulted in and zeroed whole 2 MiB pages, most of which it
    /// never touched. At a fixed 10k msg/s on the 3-node cluster that zeroing
    /// (`clear_page_erms` under `do_huge_pmd_anonymous_page`) was 19.5% of the
    /// three processes' CPU samples; without THP it is 0.2%, for 8x as many
    /// (4 KiB) minor faults. This is what `MIMALLOC_ALLOW_THP=0` does, done
    /// here because the allocator has already started before `main`.
    #[allow(unsafe_code, reason = "C calls: mimalloc's option and prctl")]
    pub(super) fn disable_transparent_huge_pages() {
        // SAFETY: plain integer options; mimalloc reads them atomically. prctl
        // with PR_SET_THP_DISABLE only sets a flag on this process.
        unsafe {
            mi_option_set(MI_OPTION_ALLOW_THP, 0);
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }

    /// Set them.
    #[allow(unsafe_code, reason = "a C call: mimalloc's option")]
    pub(super) fn apply() {
        // SAFETY: sets a plain integer option; mimalloc reads options
        // atomically and this option is only consulted when freed memory is
        // purged.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
        disable_transparent_huge_pages();
    }
}

fn main() {
    #[cfg(not(feature = "system-allocator"))]
    tuning::apply();
    std::process::exit(stablemq::cli::main());
}
