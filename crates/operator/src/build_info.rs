//! What this binary is: its version and how it was built, on `/metrics` as
//! `tpu_operator_build_info` (the Prometheus convention for build facts: a gauge fixed at 1 whose
//! labels carry them) and in the first log line of `run`.
//!
//! Memory and speed depend on the build: a debug binary is several times larger and slower, and
//! the `local` feature links both emulators. Dashboards can tell a release's replicas apart, and
//! the benchmarks print which build they measured (docs/benchmarks.md).

/// The cargo features this binary was built with, comma-separated; `""` for the image's build
/// (`--no-default-features`).
pub fn features() -> &'static str {
    if cfg!(feature = "local") { "local" } else { "" }
}

/// `release` or `debug`, as cargo's profiles set debug assertions.
pub fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// The C library the binary is linked with, which decides the allocator (crate::allocator).
pub fn libc() -> &'static str {
    if cfg!(target_env = "gnu") {
        "glibc"
    } else if cfg!(target_env = "musl") {
        "musl"
    } else {
        "other"
    }
}

/// The labels of `tpu_operator_build_info`.
pub fn labels() -> Vec<(&'static str, &'static str)> {
    vec![
        ("version", env!("CARGO_PKG_VERSION")),
        ("profile", profile()),
        ("features", features()),
        ("libc", libc()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::{encoding::text::encode, metrics::info::Info, registry::Registry};

    #[test]
    fn build_info_is_one_series_naming_the_build() {
        let mut registry = Registry::default();
        registry.register("tpu_operator_build", "build", Info::new(labels()));
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        let line = out
            .lines()
            .find(|l| l.starts_with("tpu_operator_build_info{"))
            .unwrap_or_else(|| panic!("no build info series in {out}"));
        assert!(
            line.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))),
            "{line}"
        );
        assert!(line.contains(&format!("profile=\"{}\"", profile())), "{line}");
        // Test builds have the default features (the `local` subcommand's emulators).
        assert!(line.contains("features=\"local\""), "{line}");
        assert!(line.ends_with(" 1"), "{line}");
    }
}
