//! Drawing the objects' progress. On a terminal: one indicatif bar per object, with its phase and
//! stage, the emulated time it has taken and an emulated ETA. Anywhere else (a pipe, a CI log, a
//! test): each object's line printed again only when its phase, stage or message changed, so the
//! output is the same on every run.
//!
//! The ETA is how long the emulated cloud takes for what the object asks of it, from gcp-emulator's
//! durations (a Dataproc batch: pending then running; a Vertex job: queued, pending, running; a TPU
//! VM: the node's creation, then the workload), minus what has passed. It is what the run will take
//! unless something is injected or waits (a stockout, a retry); past it, the bar says "ETA now".

use std::{
    collections::BTreeMap,
    io::{IsTerminal, Write},
    time::Duration,
};

use chrono::{DateTime, Utc};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde_json::Value;

use super::progress::{Key, Line, Seen, Tracker, format_duration};

/// Draws bars on a terminal, changed lines elsewhere.
pub enum Display {
    Bars(Box<Bars>),
    Changes(Vec<Line>),
}

impl Display {
    pub fn new(durations: gcp_emulator::Durations) -> Self {
        if std::io::stdout().is_terminal() {
            Display::Bars(Box::new(Bars::new(durations)))
        } else {
            Display::Changes(Vec::new())
        }
    }

    pub fn show(&mut self, tracker: &Tracker, now: DateTime<Utc>) {
        match self {
            Display::Bars(bars) => bars.show(tracker, now),
            Display::Changes(drawn) => {
                let lines = tracker.lines(now);
                let mut out = std::io::stdout().lock();
                // Elapsed time alone changes every poll; print a line again only when the
                // object's phase, stage or message changed.
                for line in &lines {
                    let seen = drawn
                        .iter()
                        .any(|d| d.state == line.state && d.message == line.message);
                    if !seen {
                        let _ = writeln!(out, "{line}");
                    }
                }
                let _ = out.flush();
                *drawn = lines;
            }
        }
    }

    /// Prints one line above the objects' progress.
    pub fn note(&mut self, line: &str) {
        match self {
            Display::Bars(bars) => {
                let _ = bars.multi.println(line);
            }
            Display::Changes(_) => println!("{line}"),
        }
    }

    /// Leaves the bars where they are (finished) before the summary is printed.
    pub fn finish(&mut self) {
        if let Display::Bars(bars) = self {
            for bar in bars.bars.values() {
                bar.abandon();
            }
            bars.bars.clear();
        }
    }
}

/// One bar per object, in the tracker's order (owners first, their children under them).
pub struct Bars {
    multi: MultiProgress,
    bars: BTreeMap<Key, ProgressBar>,
    durations: gcp_emulator::Durations,
}

impl Bars {
    fn new(durations: gcp_emulator::Durations) -> Self {
        Self {
            multi: MultiProgress::new(),
            bars: BTreeMap::new(),
            durations,
        }
    }

    fn style() -> ProgressStyle {
        ProgressStyle::with_template("{prefix} [{bar:20}] {msg}")
            .expect("a valid template")
            .progress_chars("=> ")
    }

    fn show(&mut self, tracker: &Tracker, now: DateTime<Utc>) {
        let ordered = tracker.ordered();
        let width = ordered
            .iter()
            .map(|(k, _, depth)| k.to_string().len() + 2 * depth)
            .max()
            .unwrap_or(0);
        for (key, seen, depth) in ordered {
            let bar = self.bars.entry(key.clone()).or_insert_with(|| {
                let bar = self.multi.add(ProgressBar::new(1).with_style(Self::style()));
                bar.set_prefix(format!("{:width$}", format!("{}{key}", "  ".repeat(depth))));
                bar
            });
            let elapsed = seen.elapsed(now);
            let expected = expected(&key.kind, seen, &self.durations);
            let phase = if seen.gone { "Deleted" } else { seen.phase() };
            let eta = match expected {
                _ if seen.finished.is_some() || seen.gone => String::new(),
                Some(total) if total > elapsed => {
                    format!("  ETA {}", format_duration(total - elapsed))
                }
                Some(_) => "  ETA now".into(),
                None => String::new(),
            };
            let seconds = |d: chrono::Duration| d.num_seconds().max(1) as u64;
            let length = expected.map_or(seconds(elapsed), seconds).max(seconds(elapsed));
            bar.set_length(length);
            bar.set_position(if seen.finished.is_some() {
                length
            } else {
                seconds(elapsed)
            });
            bar.set_message(format!(
                "{phase:<13} {:<22} {:>7}{eta}",
                seen.stage(&key.kind),
                format_duration(elapsed)
            ));
        }
    }
}

/// How long the emulated cloud takes for what the object asks of it (`None`: not known).
fn expected(kind: &str, seen: &Seen, d: &gcp_emulator::Durations) -> Option<chrono::Duration> {
    let spec = seen.object.get("spec")?;
    let batch = d.batch_pending + d.batch_run;
    let total = match kind {
        "PreprocessBatch" => batch,
        "TpuSlice" => slice(spec, d),
        "TrainingPipeline" => {
            let preprocess = if spec.get("preprocess").is_some() {
                batch
            } else {
                Duration::ZERO
            };
            let training = &spec["training"];
            let train = if training.get("vertex").is_some() {
                d.job_queued + d.job_pending + d.job_run
            } else {
                slice(&training["tpuVm"], d) + d.tpu_workload
            };
            preprocess + train
        }
        _ => return None,
    };
    chrono::Duration::from_std(total).ok()
}

/// A slice's provisioning: a Compute Engine instance, a queued resource, or a TPU node.
fn slice(spec: &Value, d: &gcp_emulator::Durations) -> Duration {
    if spec["provisioner"] == "ComputeEngine" {
        d.instance_provision
    } else if spec["capacity"].get("queued").is_some() || spec["capacity"].get("reserved").is_some() {
        d.qr_accept + d.qr_provision
    } else {
        d.tpu_create
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn seen(spec: Value) -> Seen {
        Seen::applied(json!({ "spec": spec }))
    }

    /// The ETA adds up what the emulated cloud does for each stage, from its own durations.
    #[test]
    fn the_expected_time_is_the_emulators_durations_for_each_stage() {
        let d = gcp_emulator::Durations::default();
        let minutes = |t: Option<chrono::Duration>| t.map(|t| t.num_seconds());
        let secs = |t: Duration| t.as_secs() as i64;
        let vertex = seen(json!({"preprocess": {}, "training": {"vertex": {}}}));
        assert_eq!(
            minutes(expected("TrainingPipeline", &vertex, &d)),
            Some(secs(
                d.batch_pending + d.batch_run + d.job_queued + d.job_pending + d.job_run
            ))
        );
        let tpu_vm = seen(json!({"training": {"tpuVm": {"capacity": {"queued": {}}}}}));
        assert_eq!(
            minutes(expected("TrainingPipeline", &tpu_vm, &d)),
            Some(secs(d.qr_accept + d.qr_provision + d.tpu_workload))
        );
        let compute = seen(json!({"provisioner": "ComputeEngine"}));
        assert_eq!(
            minutes(expected("TpuSlice", &compute, &d)),
            Some(secs(d.instance_provision))
        );
        assert_eq!(
            minutes(expected("TpuSlice", &seen(json!({})), &d)),
            Some(secs(d.tpu_create))
        );
        assert_eq!(expected("Other", &vertex, &d), None);
    }
}
