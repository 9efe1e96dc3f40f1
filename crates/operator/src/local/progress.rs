//! Watching the objects converge: what each object (kind/name) is doing, its phase, stage and
//! elapsed time, as lines ([`super::display`] draws them).
//!
//! Elapsed times are emulated time (the gcp-emulator clock the controllers also use), because
//! that is what the user would wait for in a real cloud.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use kube::{
    Api,
    api::{DynamicObject, ListParams},
    discovery::ApiResource,
};
use serde_json::Value;
use tpu_operator_api::{PreprocessBatch, TpuSlice, TrainingPipeline};

/// Identity of a tracked object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// How an object ended (or not yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Running,
    /// Ready=True: succeeded (batch, pipeline) or up (slice).
    Ready,
    /// Stalled=True or phase Failed.
    Failed,
}

/// What is known about one object.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Emulated time it was first seen.
    pub first_seen: DateTime<Utc>,
    /// Emulated time it first reached a final outcome.
    pub finished: Option<DateTime<Utc>>,
    /// The latest object as listed.
    pub object: Value,
    /// Listed no longer (deleted).
    pub gone: bool,
    /// One of the applied manifests (as opposed to a child an owner created).
    pub applied: bool,
}

impl Seen {
    /// An applied object first seen now, not finished (the tests' fixture).
    #[cfg(test)]
    pub(super) fn applied(object: Value) -> Self {
        Self {
            first_seen: Utc::now(),
            finished: None,
            object,
            gone: false,
            applied: true,
        }
    }

    pub fn status(&self, field: &str) -> Option<&Value> {
        self.object.get("status").and_then(|s| s.get(field))
    }

    fn status_str(&self, field: &str) -> Option<&str> {
        self.status(field).and_then(Value::as_str)
    }

    pub fn phase(&self) -> &str {
        self.status_str("phase").unwrap_or("Pending")
    }

    fn condition_field(&self, kind: &str, field: &str) -> Option<&str> {
        self.status("conditions")?
            .as_array()?
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))?
            .get(field)?
            .as_str()
    }

    fn condition(&self, kind: &str) -> Option<&str> {
        self.condition_field(kind, "status")
    }

    /// The Stalled condition's message, when it is True.
    pub fn stalled_message(&self) -> Option<&str> {
        (self.condition("Stalled") == Some("True"))
            .then(|| self.condition_field("Stalled", "message"))
            .flatten()
    }

    pub fn outcome(&self) -> Outcome {
        if self.condition("Stalled") == Some("True") || self.phase() == "Failed" {
            Outcome::Failed
        } else if self.condition("Ready") == Some("True") {
            Outcome::Ready
        } else {
            Outcome::Running
        }
    }

    /// The kind-specific "what is happening now": the pipeline's current stage, the Dataproc
    /// batch state, the TPU node / queued resource state.
    pub fn stage(&self, kind: &str) -> String {
        match kind {
            "TrainingPipeline" => {
                let Some(current) = self.status_str("currentStage") else {
                    return "-".into();
                };
                let state = self
                    .status("stages")
                    .and_then(Value::as_array)
                    .and_then(|stages| {
                        stages
                            .iter()
                            .find(|s| s.get("name").and_then(Value::as_str) == Some(current))
                    })
                    .and_then(|s| s.get("state"))
                    .and_then(Value::as_str)
                    .unwrap_or("Pending");
                format!("{current}: {state}")
            }
            "PreprocessBatch" => self.status_str("batchState").unwrap_or("-").to_string(),
            "TpuSlice" => self
                .status_str("queuedResourceState")
                .filter(|_| self.status_str("nodeState").is_none())
                .or_else(|| self.status_str("nodeState"))
                .unwrap_or("-")
                .to_string(),
            _ => "-".into(),
        }
    }

    /// The status message, else the Ready condition's (some kinds only set conditions).
    /// A TrainingPipeline's newest checkpoint as `ckpt <step> (<age> ago)`, from
    /// `status.checkpoint` (the `LAST CKPT` column of `kubectl get tpl`).
    pub fn checkpoint(&self, now: DateTime<Utc>) -> Option<String> {
        let ckpt = self.status("checkpoint")?;
        let time = ckpt.get("latestTime")?.as_str()?;
        let time = DateTime::parse_from_rfc3339(time).ok()?.with_timezone(&Utc);
        let age = format_duration((now - time).max(chrono::Duration::zero()));
        Some(match ckpt.get("latestStep").and_then(Value::as_i64) {
            Some(step) => format!("ckpt {step} ({age} ago)"),
            None => format!("ckpt ({age} ago)"),
        })
    }

    pub fn message(&self) -> &str {
        self.status_str("message")
            .or_else(|| self.condition_field("Ready", "message"))
            .unwrap_or("")
    }

    /// Emulated time from first seen to finished (or `now`).
    pub fn elapsed(&self, now: DateTime<Utc>) -> chrono::Duration {
        self.finished.unwrap_or(now) - self.first_seen
    }
}

/// The three kinds, as dynamic resources (children of any kind are tracked too).
pub fn tracked_resources() -> Vec<ApiResource> {
    vec![
        ApiResource::erase::<TrainingPipeline>(&()),
        ApiResource::erase::<PreprocessBatch>(&()),
        ApiResource::erase::<TpuSlice>(&()),
    ]
}

/// Every object of the project's kinds seen so far.
#[derive(Debug, Default)]
pub struct Tracker {
    pub objects: BTreeMap<Key, Seen>,
}

impl Tracker {
    /// Lists all three kinds in every namespace and records what changed.
    pub async fn poll(
        &mut self,
        client: &kube::Client,
        now: DateTime<Utc>,
        applied: &[Key],
    ) -> anyhow::Result<()> {
        let mut present = Vec::new();
        for resource in tracked_resources() {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            for obj in api.list(&ListParams::default()).await? {
                let key = Key {
                    kind: resource.kind.clone(),
                    namespace: obj.metadata.namespace.clone().unwrap_or_default(),
                    name: obj.metadata.name.clone().unwrap_or_default(),
                };
                let value = serde_json::to_value(&obj)?;
                let seen = self.objects.entry(key.clone()).or_insert_with(|| Seen {
                    first_seen: now,
                    finished: None,
                    object: Value::Null,
                    gone: false,
                    applied: applied.contains(&key),
                });
                seen.object = value;
                seen.gone = false;
                if seen.finished.is_none() && seen.outcome() != Outcome::Running {
                    seen.finished = Some(now);
                }
                present.push(key);
            }
        }
        for (key, seen) in &mut self.objects {
            if !present.contains(key) {
                seen.gone = true;
            }
        }
        Ok(())
    }

    /// True when every applied object reached Ready or failed.
    pub fn all_applied_done(&self, applied: &[Key]) -> bool {
        applied.iter().all(|key| {
            self.objects
                .get(key)
                .is_some_and(|seen| seen.outcome() != Outcome::Running)
        })
    }

    /// True when no tracked object is listed any more.
    pub fn all_gone(&self) -> bool {
        self.objects.values().all(|seen| seen.gone)
    }

    /// Objects in display order: each top-level object followed by the objects it owns
    /// (by `ownerReferences` uid), with their depth.
    pub fn ordered(&self) -> Vec<(&Key, &Seen, usize)> {
        let uid = |seen: &Seen| {
            seen.object
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let owners = |seen: &Seen| -> Vec<String> {
            seen.object
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .map(|refs| {
                    refs.iter()
                        .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let known: Vec<String> = self.objects.values().filter_map(uid).collect();
        let mut out = Vec::new();
        let mut stack: Vec<(&Key, &Seen, usize)> = self
            .objects
            .iter()
            .filter(|(_, seen)| !owners(seen).iter().any(|o| known.contains(o)))
            .map(|(k, s)| (k, s, 0))
            .collect();
        stack.reverse();
        while let Some((key, seen, depth)) = stack.pop() {
            out.push((key, seen, depth));
            if let Some(parent) = uid(seen) {
                let mut children: Vec<_> = self
                    .objects
                    .iter()
                    .filter(|(_, child)| owners(child).contains(&parent))
                    .map(|(k, s)| (k, s, depth + 1))
                    .collect();
                children.reverse();
                stack.extend(children);
            }
        }
        out
    }

    /// One display line per object.
    pub fn lines(&self, now: DateTime<Utc>) -> Vec<Line> {
        let label = |key: &Key, depth: usize| format!("{}{key}", "  ".repeat(depth));
        let ordered = self.ordered();
        let width = ordered
            .iter()
            .map(|(k, _, d)| label(k, *d).len())
            .max()
            .unwrap_or(0);
        ordered
            .into_iter()
            .map(|(key, seen, depth)| {
                let phase = if seen.gone { "Deleted" } else { seen.phase() };
                let state = format!(
                    "{:width$}  {:<13} {:<22}",
                    label(key, depth),
                    phase,
                    seen.stage(&key.kind)
                );
                let message = seen.message();
                let message = if message.is_empty() || seen.gone {
                    String::new()
                } else {
                    format!("  {}", truncate(message, 60))
                };
                let message = match seen.checkpoint(now).filter(|_| !seen.gone) {
                    Some(ckpt) => format!("  {ckpt}{message}"),
                    None => message,
                };
                Line {
                    state,
                    elapsed: format_duration(seen.elapsed(now)),
                    message,
                }
            })
            .collect()
    }
}

/// One object's line: what it is doing, for how long, and its status message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub(super) state: String,
    pub(super) elapsed: String,
    pub(super) message: String,
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:>8}{}", self.state, self.elapsed, self.message)
    }
}

/// `1h02m`, `3m05s`, `12s`.
pub fn format_duration(d: chrono::Duration) -> String {
    tpu_operator_api::duration::format_seconds(d.num_seconds())
}

fn truncate(s: &str, max: usize) -> String {
    let first_line = s.lines().next().unwrap_or("");
    if first_line.chars().count() <= max {
        first_line.to_string()
    } else {
        let cut: String = first_line.chars().take(max - 1).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn seen(status: Value) -> Seen {
        Seen::applied(json!({ "status": status }))
    }

    #[test]
    fn outcome_and_stage_follow_the_status() {
        let running = seen(json!({
            "phase": "Training",
            "currentStage": "Train",
            "stages": [{"name": "Preprocess", "state": "Succeeded"}, {"name": "Train", "state": "Running"}],
            "conditions": [{"type": "Ready", "status": "False"}, {"type": "Stalled", "status": "False"}],
        }));
        assert_eq!(running.outcome(), Outcome::Running);
        assert_eq!(running.stage("TrainingPipeline"), "Train: Running");
        let failed = seen(json!({"phase": "Running", "conditions": [{"type": "Stalled", "status": "True"}]}));
        assert_eq!(failed.outcome(), Outcome::Failed);
        let ready = seen(
            json!({"phase": "Ready", "nodeState": "READY", "queuedResourceState": "ACTIVE",
            "conditions": [{"type": "Ready", "status": "True"}]}),
        );
        assert_eq!(ready.outcome(), Outcome::Ready);
        assert_eq!(ready.stage("TpuSlice"), "READY");
    }

    #[test]
    fn a_pipeline_line_shows_its_newest_checkpoint() {
        let now = DateTime::parse_from_rfc3339("2026-03-02T10:05:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let training = seen(json!({
            "phase": "Training",
            "checkpoint": {"latestTime": "2026-03-02T10:02:30Z", "latestStep": 1200},
        }));
        assert_eq!(training.checkpoint(now).as_deref(), Some("ckpt 1200 (2m30s ago)"));
        let stepless = seen(json!({"checkpoint": {"latestTime": "2026-03-02T10:04:50Z"}}));
        assert_eq!(stepless.checkpoint(now).as_deref(), Some("ckpt (10s ago)"));
        let none = seen(json!({"checkpoint": {"dir": "gs://b/ck/"}}));
        assert_eq!(none.checkpoint(now), None);
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(format_duration(chrono::Duration::seconds(12)), "12s");
        assert_eq!(format_duration(chrono::Duration::seconds(185)), "3m05s");
        assert_eq!(format_duration(chrono::Duration::seconds(3720)), "1h02m");
    }
}
