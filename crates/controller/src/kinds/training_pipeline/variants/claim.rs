//! Which directories a pipeline writes, and which live pipeline a new one must wait for. Two
//! pipelines writing one model or checkpoint directory resume from each other's
//! checkpoints and report the same model, so a pipeline that has not started waits while
//! another live pipeline writes where it would. Pure: no Kubernetes or Google Cloud.

use std::cmp::Ordering;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use tpu_operator_api::training_pipeline::{TrainingPipeline, TrainingPipelinePhase as Phase, placeholders};

use super::super::{checkpoints, plan::is_finished};

/// What one pipeline holds: its identity, its age, whether it runs, and the directories it
/// writes (expanded, without the trailing `/`).
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub created: Option<Time>,
    /// Not finished and not being deleted.
    pub live: bool,
    /// Past `Pending` (it created, or may have created, something), or suspended with a run to
    /// resume. A started pipeline keeps its directories whatever its age.
    pub started: bool,
    /// `spec.suspend`: one that has not started creates nothing, so it neither waits nor is
    /// waited for until it is resumed.
    pub suspended: bool,
    /// (spec field, directory): `modelDir` and the checkpoint base directory.
    pub dirs: [(&'static str, String); 2],
}

impl Claim {
    /// The claim of `tp` as stored (its placeholders are expanded here); `None` without a UID.
    pub fn of(tp: &TrainingPipeline) -> Option<Self> {
        let uid = tp.uid()?;
        let namespace = tp.namespace().unwrap_or_default();
        let name = tp.name_any();
        let me = placeholders::Identity {
            name: &name,
            namespace: &namespace,
            uid: &uid,
        };
        let artifacts = placeholders::expand_artifacts(&tp.spec.artifacts, me);
        let trim = |dir: &str| dir.trim_end_matches('/').to_string();
        let phase = tp.status.as_ref().map(|s| s.phase).unwrap_or_default();
        Some(Claim {
            live: !is_finished(phase) && tp.metadata.deletion_timestamp.is_none(),
            started: started(tp, phase),
            suspended: tp.spec.suspend,
            dirs: [
                ("modelDir", trim(&artifacts.model_dir)),
                ("checkpointDir", trim(&checkpoints::base_dir(&artifacts))),
            ],
            created: tp.metadata.creation_timestamp.clone(),
            uid,
            namespace,
            name,
        })
    }

    /// Oldest first: creation time (unknown last), then namespace and name.
    fn age_order(&self, other: &Claim) -> Ordering {
        let key = |c: &Claim| (c.created.is_none(), c.created.clone());
        key(self)
            .cmp(&key(other))
            .then_with(|| (&self.namespace, &self.name).cmp(&(&other.namespace, &other.name)))
    }
}

/// Whether `tp` began a run: any phase past `Pending` but `Suspended` and `Waiting`, which a
/// pipeline that never ran also shows (created suspended; waiting for this very rule or for its
/// policy); those began if a stage or an attempt ever started.
fn started(tp: &TrainingPipeline, phase: Phase) -> bool {
    let began = tp
        .status
        .as_ref()
        .is_some_and(|s| s.attempts > 0 || s.stages.iter().any(|g| g.attempts > 0 || g.start_time.is_some()));
    match phase {
        Phase::Pending => false,
        Phase::Suspended | Phase::Waiting => began,
        _ => true,
    }
}

/// Whether `a` and `b` are one directory or one holds the other (a `/` boundary: `gs://b/m`
/// holds `gs://b/m/checkpoints`, not `gs://b/m2`).
pub fn nested(a: &str, b: &str) -> bool {
    let under = |inner: &str, outer: &str| {
        inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    under(a, b) || under(b, a)
}

/// Where `me` and `other` collide: (my field, my directory, its field), if anywhere.
pub fn overlap<'a>(me: &'a Claim, other: &Claim) -> Option<(&'static str, &'a str, &'static str)> {
    me.dirs.iter().find_map(|(mine, dir)| {
        other
            .dirs
            .iter()
            .find(|(_, theirs)| nested(dir, theirs))
            .map(|(field, _)| (*mine, dir.as_str(), *field))
    })
}

/// Whether `me` is a pipeline that may have to wait: live, not started, not suspended.
pub fn may_wait(me: &Claim) -> bool {
    me.live && !me.started && !me.suspended
}

/// The live pipeline `me` must wait for, if any: one writing where `me` would that has started,
/// or is older and not suspended (so of two that have not started, the older goes first). `me`
/// itself never counts.
pub fn blocker<'a>(me: &Claim, others: impl IntoIterator<Item = &'a Claim>) -> Option<&'a Claim> {
    if !may_wait(me) {
        return None;
    }
    others
        .into_iter()
        .filter(|o| o.uid != me.uid && o.live && overlap(me, o).is_some())
        .filter(|o| o.started || (!o.suspended && o.age_order(me) == Ordering::Less))
        .min_by(|a, b| a.age_order(b))
}

/// The `Stalled` message: names the other pipeline only within the namespace (tenants must not
/// learn each other's objects), else only the namespace that holds the directory, so the team
/// knows whom to ask; and says what to change.
pub fn message(me: &Claim, other: &Claim) -> String {
    let (mine, dir, theirs) = overlap(me, other).unwrap_or(("modelDir", "", "modelDir"));
    let who = if other.namespace == me.namespace {
        format!(
            "TrainingPipeline {}/{} (its {theirs})",
            other.namespace, other.name
        )
    } else {
        format!("a TrainingPipeline in namespace {}", other.namespace)
    };
    format!(
        "spec.artifacts.{mine} {dir}/ is in use by {who}, which has not finished: two pipelines \
         writing one directory resume from each other's checkpoints and report the same model. \
         This pipeline starts once that one finishes or is deleted; to run both now give each its \
         own directory, e.g. modelDir: gs://BUCKET/models/$(PIPELINE_NAME)/"
    )
}

#[cfg(test)]
#[path = "claim_tests.rs"]
mod tests;
