//! Durations as users write them in specs (`24h`, `90m`, `3600s`, `1h30m`, `7d`).
//!
//! The schema pattern [`crate::schema::DURATION`] admits exactly what [`parse_duration`] accepts,
//! so a duration that passed admission always parses at reconcile time.

use std::time::Duration;

/// A duration string that does not follow `[<n>d][<n>h][<n>m][<n>s]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (write e.g. \"24h\", \"90m\", \"3600s\" or \"1h30m\")")]
pub struct DurationError {
    /// The rejected input.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses `[<n>d][<n>h][<n>m][<n>s]` (units in that order, each at most once, at least one).
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError {
        input: input.to_string(),
        reason,
    };
    if input.is_empty() {
        return Err(err("empty"));
    }
    let units = [('d', 86_400u64), ('h', 3_600), ('m', 60), ('s', 1)];
    let mut next_unit = 0;
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in input.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let Some(pos) = units.iter().position(|(u, _)| *u == c) else {
            return Err(err("unknown unit (use d, h, m or s)"));
        };
        if pos < next_unit {
            return Err(err("units out of order or repeated"));
        }
        if digits.is_empty() {
            return Err(err("a unit without a number"));
        }
        let n: u64 = digits.parse().map_err(|_| err("number too large"))?;
        total = n
            .checked_mul(units[pos].1)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| err("number too large"))?;
        digits.clear();
        next_unit = pos + 1;
    }
    if !digits.is_empty() {
        return Err(err("a number without a unit"));
    }
    Ok(Duration::from_secs(total))
}

/// `secs` as people read a run's length: `1h02m`, `3m05s`, `12s` (negative reads as `0s`).
pub fn format_seconds(secs: i64) -> String {
    let secs = secs.max(0);
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    if h > 0 {
        format!("{h}h{m:02}m")
    } else if m > 0 {
        format!("{m}m{s:02}s")
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_users_write() {
        assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("3600s").unwrap(), Duration::from_secs(3_600));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5_400));
        assert_eq!(parse_duration("7d").unwrap(), Duration::from_secs(604_800));
        assert_eq!(parse_duration("1d2h3m4s").unwrap(), Duration::from_secs(93_784));
    }

    #[test]
    fn rejects_malformed_input_with_a_reason() {
        for (bad, reason) in [
            ("", "empty"),
            ("10", "a number without a unit"),
            ("h", "a unit without a number"),
            ("5w", "unknown unit (use d, h, m or s)"),
            ("30m1h", "units out of order or repeated"),
            ("1h1h", "units out of order or repeated"),
        ] {
            assert_eq!(parse_duration(bad).unwrap_err().reason, reason, "input {bad:?}");
        }
    }

    #[test]
    fn pattern_and_parser_agree() {
        let re = regex::Regex::new(crate::schema::DURATION).unwrap();
        for s in [
            "24h", "3600s", "1h30m", "7d", "1d2h3m4s", "30m1h", "10", "h", "5w", "1h1h",
        ] {
            assert_eq!(re.is_match(s), parse_duration(s).is_ok(), "input {s:?}");
        }
    }
}
