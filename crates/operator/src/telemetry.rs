//! Logging: `tracing` to stderr, as text or JSON, filtered by `RUST_LOG` (default `info`).

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt};

use crate::config::LogFormat;

/// Installs the global subscriber. `default_level` applies when `RUST_LOG` is unset.
pub fn init(format: LogFormat, default_level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // `try_init`: a second call (tests, `local` after a failed start) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}
