//! RFC 3339 timestamps and `"3600s"` durations as proto3 JSON writes them.

use chrono::{DateTime, SecondsFormat, Utc};

/// `2024-04-01T12:34:56.123456Z` (microseconds, like Google's servers).
pub fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

pub fn parse_ts(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Parses a proto3 JSON Duration (`"3600s"`, `"0.5s"`).
pub fn parse_duration(s: &str) -> Option<chrono::Duration> {
    let secs: f64 = s.strip_suffix('s')?.parse().ok()?;
    secs.is_finite()
        .then(|| chrono::Duration::microseconds((secs * 1e6) as i64))
}

/// Formats a Duration the way proto3 JSON does (`"14400s"`, `"1.500s"`).
pub fn duration(d: std::time::Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

pub fn chrono_std(d: std::time::Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_google() {
        let t = parse_ts("2024-04-01T12:34:56.123456Z").unwrap();
        assert_eq!(ts(t), "2024-04-01T12:34:56.123456Z");
        assert_eq!(duration(std::time::Duration::from_secs(14400)), "14400s");
        assert_eq!(parse_duration("0.5s"), Some(chrono::Duration::milliseconds(500)));
        assert_eq!(parse_duration("5m"), None);
    }
}
