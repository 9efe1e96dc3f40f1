//! The checkpoint contract and what a listing of it says: which `CHECKPOINT_DIR` an attempt gets,
//! which object under it is the newest checkpoint and at which step, and whether the run has
//! stopped making progress.
//!
//! - `CHECKPOINT_DIR` is `artifacts.checkpointDir`, default `<modelDir>/checkpoints/` (the
//!   directory Vertex itself announces as `AIP_CHECKPOINT_DIR` for a job whose
//!   `baseOutputDirectory` is `modelDir`), always ending in `/`. It is a function of the spec and
//!   the counted attempt only, so a preempted slice or job recreated (no counted attempt) gets the
//!   same one; with `checkpointsOnRetry: StartClean` a counted attempt n gets
//!   `<checkpointDir>/attempt-<n>/`.
//! - The newest checkpoint is the highest step among the names directly under the directory
//!   that carry one: orbax's `<dir>/<step>/...`, the guides' `<dir>/step_<n>/...` (also
//!   `step-<n>`, `checkpoint_<n>`, `ckpt-<n>` and files such as `ckpt-<n>.index`). Orbax's
//!   in-progress `<step>.orbax-checkpoint-tmp-<t>` directories carry no step and do not count.
//!   Without any step-named entry, the newest object is the newest checkpoint.
//!
//! Does not touch Kubernetes or Google Cloud.

use chrono::{DateTime, Utc};
use tpu_operator_api::training_pipeline::{
    Artifacts, CheckpointsOnRetry, StageName, StageStatus, TrainingPipelineSpec,
};
use tpu_operator_gcp::storage::ObjectInfo;

use super::plan::join_uri;

/// Most objects one progress listing reads (10 pages of 1,000): a checkpoint directory keeps a
/// few steps of a few hundred objects each; past this the newest step may be missed, never a
/// wrong one reported as newer.
pub const MAX_LISTED: u32 = 10_000;

/// `checkpointDir` or `<modelDir>/checkpoints/`, ending in `/`.
pub fn base_dir(artifacts: &Artifacts) -> String {
    let dir = match &artifacts.checkpoint_dir {
        Some(dir) => dir.clone(),
        None => join_uri(&artifacts.model_dir, "checkpoints/"),
    };
    with_slash(dir)
}

fn with_slash(mut dir: String) -> String {
    if !dir.ends_with('/') {
        dir.push('/');
    }
    dir
}

/// The `CHECKPOINT_DIR` of counted attempt `counted` (1-based; 0 is taken as 1).
pub fn attempt_dir(artifacts: &Artifacts, counted: i32) -> String {
    let base = base_dir(artifacts);
    match artifacts.checkpoints_on_retry {
        CheckpointsOnRetry::Resume => base,
        CheckpointsOnRetry::StartClean => format!("{base}attempt-{}/", counted.max(1)),
    }
}

/// The `CHECKPOINT_DIR` of the pipeline's current counted attempt (the Train stage's
/// `attempts`, which preemptions and capacity waits do not move).
pub fn current_dir(spec: &TrainingPipelineSpec, stages: &[StageStatus]) -> String {
    let counted = stages
        .iter()
        .find(|s| s.name == StageName::Train)
        .map_or(1, |s| s.attempts);
    attempt_dir(&spec.artifacts, counted)
}

/// The step a checkpoint name (one path segment) carries.
pub fn step_of(segment: &str) -> Option<i64> {
    let digits = |s: &str| {
        (!s.is_empty() && s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    if let Some(n) = digits(segment) {
        return Some(n);
    }
    // `ckpt-100.index`, `ckpt-100.data-00000-of-00001`: the stem.
    let stem = segment.split('.').next().unwrap_or(segment);
    for prefix in ["step", "checkpoint", "ckpt"] {
        if let Some(rest) = stem.strip_prefix(prefix) {
            let rest = rest.strip_prefix(['_', '-']).unwrap_or(rest);
            if let Some(n) = digits(rest) {
                return Some(n);
            }
        }
    }
    None
}

/// The newest checkpoint found by a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Latest {
    pub uri: String,
    pub time: DateTime<Utc>,
    pub step: Option<i64>,
}

/// The newest checkpoint among `objects`, listed under `prefix` (the directory's object-name
/// prefix, ending in `/`) of `bucket`.
pub fn newest(bucket: &str, prefix: &str, objects: &[ObjectInfo]) -> Option<Latest> {
    let mut best_step: Option<Latest> = None;
    let mut best_object: Option<Latest> = None;
    for o in objects {
        let Some(rel) = o.name.strip_prefix(prefix) else {
            continue;
        };
        let Ok(time) = DateTime::parse_from_rfc3339(&o.updated).map(|t| t.with_timezone(&Utc)) else {
            continue;
        };
        if rel.is_empty() {
            continue;
        }
        let (segment, is_dir) = match rel.split_once('/') {
            Some((segment, _)) => (segment, true),
            None => (rel, false),
        };
        if let Some(step) = step_of(segment) {
            let uri = if is_dir {
                format!("gs://{bucket}/{prefix}{segment}/")
            } else {
                format!(
                    "gs://{bucket}/{prefix}{}",
                    segment.split('.').next().unwrap_or(segment)
                )
            };
            match &mut best_step {
                Some(b) if b.step.is_some_and(|s| s > step) => {}
                Some(b) if b.step == Some(step) => b.time = b.time.max(time),
                _ => {
                    best_step = Some(Latest {
                        uri,
                        time,
                        step: Some(step),
                    })
                }
            }
        } else if best_object.as_ref().is_none_or(|b| time > b.time) {
            best_object = Some(Latest {
                uri: format!("gs://{bucket}/{}", o.name),
                time,
                step: None,
            });
        }
    }
    best_step.or(best_object)
}

/// Whether a run is stalled at `now`: its newest checkpoint, or its start when it has none (or
/// only older ones, from before this run started), is older than `deadline`.
pub fn stalled(
    latest: Option<DateTime<Utc>>,
    started: DateTime<Utc>,
    deadline: std::time::Duration,
    now: DateTime<Utc>,
) -> bool {
    let since = latest.map_or(started, |t| t.max(started));
    let Ok(deadline) = chrono::Duration::from_std(deadline) else {
        return false;
    };
    now - since > deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifacts() -> Artifacts {
        Artifacts {
            model_dir: "gs://b/models/run-1".into(),
            ..Default::default()
        }
    }

    fn obj(name: &str, updated: &str) -> ObjectInfo {
        ObjectInfo {
            name: name.into(),
            size: 1,
            updated: updated.into(),
        }
    }

    #[test]
    fn checkpoint_dir_defaults_under_model_dir_and_start_clean_splits_by_counted_attempt() {
        let mut a = artifacts();
        assert_eq!(base_dir(&a), "gs://b/models/run-1/checkpoints/");
        assert_eq!(
            attempt_dir(&a, 1),
            attempt_dir(&a, 3),
            "Resume: one dir for every retry"
        );
        a.checkpoint_dir = Some("gs://c/ckpt".into());
        assert_eq!(attempt_dir(&a, 2), "gs://c/ckpt/");
        a.checkpoints_on_retry = CheckpointsOnRetry::StartClean;
        assert_eq!(attempt_dir(&a, 0), "gs://c/ckpt/attempt-1/");
        assert_eq!(attempt_dir(&a, 2), "gs://c/ckpt/attempt-2/");
    }

    #[test]
    fn steps_from_orbax_and_the_guides_layouts() {
        for (segment, want) in [
            ("1200", Some(1200)),
            ("step_300", Some(300)),
            ("step-7", Some(7)),
            ("checkpoint_40", Some(40)),
            ("ckpt-100.index", Some(100)),
            ("ckpt-100.data-00000-of-00001", Some(100)),
            ("1200.orbax-checkpoint-tmp-1712345678", None),
            ("step_", None),
            ("steps_3", None),
            ("_CHECKPOINT_METADATA", None),
            ("", None),
            ("99999999999999999999999", None),
        ] {
            assert_eq!(step_of(segment), want, "{segment}");
        }
    }

    #[test]
    fn newest_is_the_highest_step_not_the_last_name_or_write() {
        let objects = [
            obj("ck/1000/state/a", "2026-03-02T10:00:00Z"),
            obj("ck/1000/state/b", "2026-03-02T10:01:00Z"),
            // Lexically after 1000, numerically before it, and rewritten later.
            obj("ck/200/state/a", "2026-03-02T11:00:00Z"),
            obj("ck/2000.orbax-checkpoint-tmp-5/x", "2026-03-02T12:00:00Z"),
            obj("ck/events.out.tfevents", "2026-03-02T12:30:00Z"),
        ];
        let got = newest("b", "ck/", &objects).unwrap();
        assert_eq!(got.uri, "gs://b/ck/1000/");
        assert_eq!(got.step, Some(1000));
        assert_eq!(got.time.to_rfc3339(), "2026-03-02T10:01:00+00:00");
    }

    #[test]
    fn step_files_and_step_less_layouts() {
        let files = [
            obj("ck/ckpt-5.index", "2026-03-02T10:00:00Z"),
            obj("ck/ckpt-10.index", "2026-03-02T10:05:00Z"),
            obj("ck/ckpt-10.data-00000-of-00001", "2026-03-02T10:06:00Z"),
        ];
        let got = newest("b", "ck/", &files).unwrap();
        assert_eq!((got.uri.as_str(), got.step), ("gs://b/ck/ckpt-10", Some(10)));
        assert_eq!(got.time.to_rfc3339(), "2026-03-02T10:06:00+00:00");
        let plain = [
            obj("ck/model.pt", "2026-03-02T10:00:00Z"),
            obj("ck/latest.pt", "2026-03-02T10:09:00Z"),
        ];
        let got = newest("b", "ck/", &plain).unwrap();
        assert_eq!((got.uri.as_str(), got.step), ("gs://b/ck/latest.pt", None));
        assert_eq!(newest("b", "ck/", &[]), None);
    }

    #[test]
    fn stall_counts_from_the_newest_checkpoint_or_the_start() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let start = t("2026-03-02T09:00:00Z");
        let deadline = std::time::Duration::from_secs(30 * 60);
        assert!(!stalled(None, start, deadline, t("2026-03-02T09:30:00Z")));
        assert!(stalled(None, start, deadline, t("2026-03-02T09:30:01Z")));
        let ckpt = Some(t("2026-03-02T09:20:00Z"));
        assert!(!stalled(ckpt, start, deadline, t("2026-03-02T09:45:00Z")));
        assert!(stalled(ckpt, start, deadline, t("2026-03-02T09:50:01Z")));
        // A checkpoint from before this run started does not make it look stalled at once.
        let old = Some(t("2026-03-01T09:00:00Z"));
        assert!(!stalled(old, start, deadline, t("2026-03-02T09:10:00Z")));
    }
}
