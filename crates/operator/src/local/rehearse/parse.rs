//! The `--inject` values: one short word with arguments each, parsed at the flag.

use std::time::Duration;

/// One `--inject` value.
#[derive(Clone, Debug, PartialEq)]
pub enum Injection {
    Preempt {
        after: Duration,
    },
    /// Google announces maintenance of the first TPU VM node that has run `after`; one it lets
    /// the customer start earlier (`canReschedule`) when `reschedulable`.
    Maintenance {
        after: Duration,
        reschedulable: bool,
    },
    Stockout {
        zone: String,
        accelerator: String,
        lasts: Option<Duration>,
    },
    Fail {
        stage: Stage,
        attempts: u32,
    },
    /// A reservation (full name) that exists with all its capacity in use.
    FullReservation {
        name: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Preprocess,
    Train,
}

const FORMS: &str = "preempt:AFTER (e.g. preempt:5m), maintenance:AFTER[:reschedulable] (e.g. maintenance:2m), stockout:ZONE:ACCELERATOR[:FOR] \
                     (e.g. stockout:us-central2-b:v5p:20m), fail:preprocess[:N], fail:train[:N] or \
                     full-reservation:projects/P/locations/ZONE/reservations/NAME";

/// The `--inject` value parser.
pub fn parse(value: &str) -> Result<Injection, String> {
    let parts: Vec<&str> = value.split(':').collect();
    let duration = |text: &str| {
        humantime::parse_duration(text)
            .map_err(|e| format!("`{text}` is not a duration ({e}); e.g. 90s, 5m, 1h"))
    };
    match parts.as_slice() {
        ["preempt", after] => Ok(Injection::Preempt {
            after: duration(after)?,
        }),
        ["maintenance", after, rest @ ..] if rest.len() <= 1 => Ok(Injection::Maintenance {
            after: duration(after)?,
            reschedulable: match rest.first() {
                None => false,
                Some(&"reschedulable") => true,
                Some(other) => return Err(format!("`{other}` is not `reschedulable`: {FORMS}")),
            },
        }),
        ["stockout", zone, accelerator, rest @ ..] if rest.len() <= 1 => {
            if zone.is_empty() || accelerator.is_empty() {
                return Err(format!("a stockout names a zone and an accelerator: {FORMS}"));
            }
            Ok(Injection::Stockout {
                zone: (*zone).to_owned(),
                accelerator: (*accelerator).to_owned(),
                lasts: rest.first().map(|d| duration(d)).transpose()?,
            })
        }
        ["fail", stage, rest @ ..] if rest.len() <= 1 => fail(stage, rest.first().copied()),
        ["full-reservation", name] => {
            let parts: Vec<&str> = name.split('/').collect();
            match parts.as_slice() {
                ["projects", p, "locations", z, "reservations", r]
                    if !p.is_empty() && !z.is_empty() && !r.is_empty() =>
                {
                    Ok(Injection::FullReservation {
                        name: (*name).to_owned(),
                    })
                }
                _ => Err(format!(
                    "`{name}` is not a reservation's full name (projects/P/locations/ZONE/reservations/NAME): {FORMS}"
                )),
            }
        }
        _ => Err(format!("the accepted forms are {FORMS}")),
    }
}

/// `fail:STAGE[:N]`: the stage, and how many attempts (1 when N is not given).
fn fail(stage: &str, attempts: Option<&str>) -> Result<Injection, String> {
    let stage = match stage {
        "preprocess" => Stage::Preprocess,
        "train" => Stage::Train,
        other => return Err(format!("`{other}` is not a stage (preprocess or train)")),
    };
    let attempts = match attempts {
        None => 1,
        Some(n) => n
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("`{n}` is not a number of attempts (1 or more)"))?,
    };
    Ok(Injection::Fail { stage, attempts })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_parses_and_a_bad_one_names_the_accepted_forms() {
        assert_eq!(
            parse("preempt:5m"),
            Ok(Injection::Preempt {
                after: Duration::from_secs(300)
            })
        );
        assert_eq!(
            parse("maintenance:2m:reschedulable"),
            Ok(Injection::Maintenance {
                after: Duration::from_secs(120),
                reschedulable: true
            })
        );
        assert_eq!(
            parse("maintenance:2m"),
            Ok(Injection::Maintenance {
                after: Duration::from_secs(120),
                reschedulable: false
            })
        );
        assert!(
            parse("maintenance:2m:soon")
                .unwrap_err()
                .contains("reschedulable")
        );
        assert_eq!(
            parse("stockout:us-central2-b:v5p:20m"),
            Ok(Injection::Stockout {
                zone: "us-central2-b".into(),
                accelerator: "v5p".into(),
                lasts: Some(Duration::from_secs(1200)),
            })
        );
        assert_eq!(
            parse("stockout:us-central2-b:v5p-8"),
            Ok(Injection::Stockout {
                zone: "us-central2-b".into(),
                accelerator: "v5p-8".into(),
                lasts: None,
            })
        );
        assert_eq!(
            parse("fail:train"),
            Ok(Injection::Fail {
                stage: Stage::Train,
                attempts: 1
            })
        );
        assert_eq!(
            parse("fail:preprocess:2"),
            Ok(Injection::Fail {
                stage: Stage::Preprocess,
                attempts: 2
            })
        );
        for bad in [
            "preempt",
            "reboot:1h",
            "fail:eval",
            "fail:train:0",
            "stockout::v5p",
            "preempt:soon",
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(err.contains("preempt:") || err.contains('`'), "{bad}: {err}");
        }
        assert!(parse("reboot:1h").unwrap_err().contains("fail:train[:N]"));
    }
}
