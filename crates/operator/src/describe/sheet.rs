//! The lines of a description: `Label:  value` rows, indented items, one line each (long values
//! are cut, so the whole fits one screen).

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use tpu_operator_api::common::{CostEstimate, Links};

/// Widest a line gets.
const WIDTH: usize = 140;

#[derive(Default)]
pub struct Sheet {
    lines: Vec<String>,
}

impl Sheet {
    /// `Label:` and the value, aligned.
    pub fn row(&mut self, label: &str, value: &str) {
        self.push(format!("{:<13}{value}", format!("{label}:")));
    }

    /// A heading of indented items.
    pub fn section(&mut self, title: &str) {
        self.push(format!("{title}:"));
    }

    pub fn item(&mut self, text: &str) {
        self.push(format!("  {text}"));
    }

    fn push(&mut self, line: String) {
        let line = line.replace(['\n', '\r'], " ");
        self.lines.push(match line.char_indices().nth(WIDTH - 1) {
            Some((at, _)) => format!("{}…", &line[..at]),
            None => line,
        });
    }

    pub fn render(&self) -> String {
        self.lines.iter().map(|l| format!("{}\n", l.trim_end())).collect()
    }

    /// `Phase:` with the Ready condition, and `Message:`.
    pub fn phase(&mut self, phase: &str, conditions: &[Condition], message: Option<&str>) {
        let ready = ready(conditions)
            .map(|c| format!(" (Ready={}, {})", c.status, c.reason))
            .unwrap_or_default();
        self.row("Phase", &format!("{phase}{ready}"));
        if let Some(m) = message.filter(|m| !m.is_empty()) {
            self.row("Message", m);
        }
    }

    /// `Waiting for:` what keeps a live object from being ready (the Ready condition's reason and
    /// message), or that nothing does.
    pub fn waits_for(&mut self, finished: bool, conditions: &[Condition], extra: Option<String>) {
        let text = if finished {
            "nothing (finished)".to_string()
        } else if let Some(extra) = extra {
            extra
        } else {
            match ready(conditions) {
                Some(c) if c.status == "True" => "nothing (ready)".into(),
                Some(c) => format!("{}: {}", c.reason, c.message),
                None => "the operator to reconcile it (no Ready condition yet)".into(),
            }
        };
        self.row("Waiting for", &text);
    }

    /// `Cost:` so far and the rate now.
    pub fn cost(&mut self, cost: Option<&CostEstimate>) {
        let text = match cost {
            Some(c) => {
                let key = c
                    .price_key
                    .as_deref()
                    .map(|k| format!(" ({k})"))
                    .unwrap_or_default();
                format!("${:.2} so far, ${:.2}/h now{key}", c.so_far_usd, c.per_hour_usd)
            }
            None => "none yet".into(),
        };
        self.row("Cost", &text);
    }

    /// `Links:` the object's pages and its logs command.
    pub fn links(&mut self, links: Option<&Links>, logs_cmd: &str) {
        self.section("Links");
        if let Some(l) = links {
            for (what, url) in [
                ("console", &l.console),
                ("logs", &l.logs),
                ("tensorboard", &l.tensorboard),
            ] {
                if let Some(url) = url {
                    self.item(&format!("{what:<12}{url}"));
                }
            }
            for (replica, url) in &l.web_access {
                self.item(&format!("{:<12}{url}", format!("shell {replica}")));
            }
        }
        self.item(&format!("{:<12}{logs_cmd}", "logs cmd"));
    }
}

fn ready(conditions: &[Condition]) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == "Ready")
}

pub fn to_chrono(t: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp(t.0.as_second(), 0).unwrap_or_default()
}

/// `2026-05-02 10:04:25Z`.
pub fn stamp(t: &Time) -> String {
    to_chrono(t).format("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// `10:04:25`.
pub fn clock(t: &Time) -> String {
    to_chrono(t).format("%H:%M:%S").to_string()
}

/// `4m17s`, `2h3m`, `12s` (from `a` to `b`).
pub fn took(a: &Time, b: &Time) -> String {
    let s = (to_chrono(b) - to_chrono(a)).num_seconds().max(0);
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

/// `start → end (took)`, or `since start` while it runs.
pub fn span(start: Option<&Time>, end: Option<&Time>) -> String {
    match (start, end) {
        (Some(a), Some(b)) => format!("{} → {} ({})", stamp(a), clock(b), took(a, b)),
        (Some(a), None) => format!("since {}", stamp(a)),
        _ => "not started".into(),
    }
}

/// When an Event last happened.
pub fn event_time(e: &Event) -> Option<Time> {
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| Time(t.0))
        .or_else(|| e.last_timestamp.clone())
        .or_else(|| e.event_time.as_ref().map(|t| Time(t.0)))
        .or_else(|| e.metadata.creation_timestamp.clone())
}
