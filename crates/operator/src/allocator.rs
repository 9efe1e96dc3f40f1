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

/// How often [`trim`] hands free heap pages back to the kernel.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Returns the heap's free pages to the kernel every [`TRIM_EVERY`] until the runtime stops.
/// glibc gives memory back only from the top of an arena; a freed list page below live
/// allocations stays resident until `malloc_trim`, which also releases whole free pages inside
/// the arenas (malloc_trim(3), "since glibc 2.8"). Call from inside the tokio runtime.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim_periodically() {
    tokio::spawn(async {
        let mut every = tokio::time::interval(TRIM_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            // SAFETY: malloc_trim only walks glibc's own arenas under their locks; it takes a
            // plain integer (the padding to keep at the top) and touches no Rust object.
            #[allow(unsafe_code)]
            unsafe {
                libc::malloc_trim(0);
            }
        }
    });
}

/// Other C libraries: nothing to trim.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim_periodically() {}
