//! glibc malloc settings for a process whose large allocations come in bursts.
//!
//! The operator's largest allocations are short-lived: a Google Cloud list page being collected
//! and decoded (one to several MiB), a Kubernetes list page, hyper's read buffers growing while
//! such a body arrives. glibc serves blocks of `M_MMAP_THRESHOLD` (128 KiB) and more with their
//! own mapping, returned to the kernel on `free`, but by default it raises that threshold to the
//! size of every mapped block freed (up to 32 MiB; mallopt(3), "M_MMAP_THRESHOLD"). After the
//! first list page, pages come from the heap arenas instead, where the small long-lived objects
//! allocated meanwhile (cache entries, status writes) pin them: freed, they stay resident.
//! Setting the threshold explicitly turns that adjustment off (mallopt(3): setting
//! `M_MMAP_THRESHOLD` disables the dynamic threshold), so a burst's large blocks go back to the
//! kernel when it ends. At 10,000 objects this took the peak RSS from 123 to 105 MiB (release
//! build, docs/benchmarks.md).
//!
//! No periodic `malloc_trim`: trimming every 2 s took the peak RSS at 10,000 objects from 102.5
//! to 102.3 MiB only (the peak is the heap's own burst, not pages glibc kept), and without it the
//! same run peaked at 111.4 MiB against 109.8–112.3 MiB with it (LTO off), at the same lag
//! (docs/benchmarks.md, issues 34 and 38). What it did cost: an unsafe call on a runtime worker,
//! holding the arenas' locks while it walked them, every 2 s.
//!
//! A `GLIBC_TUNABLES` set by whoever starts the process wins: nothing is changed then. The
//! production image is linked with glibc too (Dockerfile; docs/architecture.md, "The image"), so
//! this applies to every build users run; other C libraries keep their allocator's defaults.

/// Blocks at least this large get their own mapping (glibc's initial threshold, kept fixed).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 128 * 1024;

/// Applies the settings above. Call first in `main`, before any thread exists.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune() {
    if std::env::var_os("GLIBC_TUNABLES").is_some() {
        return;
    }
    // SAFETY: mallopt only sets a malloc parameter; it takes plain integers and is called
    // before the runtime starts any thread.
    #[allow(unsafe_code)]
    let accepted = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) };
    // mallopt returns 0 on error. Not fatal: the process runs with glibc's defaults.
    if accepted == 0 {
        eprintln!("warning: glibc refused M_MMAP_THRESHOLD={MMAP_THRESHOLD}; using its defaults");
    }
}

/// Other C libraries (e.g. musl): their allocator's defaults.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune() {}
