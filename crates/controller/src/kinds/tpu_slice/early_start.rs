//! Starting a reschedulable maintenance early (`spec.maintenance.startEarly: AfterCheckpoint`):
//! once the workload was asked for a checkpoint before an announced window that Google lets the
//! customer move (`canReschedule`), the operator looks in the workload's `CHECKPOINT_DIR` for a
//! checkpoint committed since the request and, as soon as there is one, starts the maintenance
//! itself: `nodes.performMaintenance` for a TPU node of its own,
//! `queuedResources.performMaintenanceQueuedResource` (naming only that node) for a node of a
//! queued resource (`capacity.queued`, `capacity.reserved`, a multislice's slice), and
//! `instances.performMaintenance` of each VM under notice on Compute Engine. Waiting for the
//! window instead loses every step trained between that checkpoint and the window.
//!
//! A checkpoint counts as committed by its commit marker: Orbax writes `_CHECKPOINT_METADATA`
//! (older versions `commit_success.txt`) into the step's directory after everything else, so
//! a marker written at or after the request is a checkpoint the restart can restore. The
//! directory is listed on each pass while the commit is awaited (every `--poll-active`), which
//! is at most `checkpointLead` long: the window starts then anyway.

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    tpu_slice::{MaintenanceSpec, MaintenanceState, StartEarly, TpuSlice, TpuSliceSpec, TpuSliceStatus},
    training_pipeline::CHECKPOINT_DIR_ENV,
};
use tpu_operator_gcp::{ObjectInfo, maintenance::upcoming_maintenance, parse_gs_uri, tpu_v2::model::Node};

use crate::{reconcile::handles::Io, runtime::error::ReconcileError};

/// The names of the objects that commit a checkpoint's step directory.
const COMMIT_MARKERS: [&str; 2] = ["_CHECKPOINT_METADATA", "commit_success.txt"];

/// Objects read per listing: the directory's newest steps are all a listing needs to hold, and
/// a checkpoint directory keeps a handful of steps of at most a few hundred objects each.
const MAX_LISTED: u32 = 10_000;

/// Where to look for the commit, and since when: `Some((CHECKPOINT_DIR, request time))` while
/// the slice's shown maintenance is pending, reschedulable, asked for a checkpoint and not yet
/// started, on a slice whose workload says where it checkpoints and that may start it (every
/// provisioner and kind of capacity can).
pub fn awaited(spec: &TpuSliceSpec, old: &TpuSliceStatus) -> Option<(String, DateTime<Utc>)> {
    let start_early = spec
        .maintenance
        .as_ref()
        .map_or(StartEarly::default(), MaintenanceSpec::start_early);
    if start_early != StartEarly::AfterCheckpoint {
        return None;
    }
    let m = old.maintenance.as_ref()?;
    let waiting = m.state == MaintenanceState::Pending && m.can_reschedule && m.start_request_time.is_none();
    let asked = m.checkpoint_request_time.as_ref().filter(|_| waiting)?;
    let dir = spec
        .workload
        .as_ref()?
        .env
        .iter()
        .find(|e| e.name == CHECKPOINT_DIR_ENV)?
        .value
        .clone();
    parse_gs_uri(&dir)?;
    let since = DateTime::<Utc>::from_timestamp(asked.0.as_second(), 0)?;
    Some((dir, since))
}

/// The step directory (`gs://…/<step>/`) of the newest checkpoint under `dir` committed at or
/// after `since`, among `objects` (a listing of `dir`).
pub fn committed_since(dir: &str, since: DateTime<Utc>, objects: &[ObjectInfo]) -> Option<String> {
    let uri = parse_gs_uri(dir)?;
    objects
        .iter()
        .filter_map(|o| {
            let (step_dir, marker) = o.name.rsplit_once('/')?;
            let at = DateTime::parse_from_rfc3339(&o.updated).ok()?.to_utc();
            (COMMIT_MARKERS.contains(&marker) && at >= since).then_some((at, step_dir))
        })
        .max()
        .map(|(_, step_dir)| format!("gs://{}/{step_dir}/", uri.bucket))
}

/// Reads `CHECKPOINT_DIR` when a commit is [`awaited`], as the namespace's Google identity:
/// the committed checkpoint, if one is there yet. A directory the identity cannot read leaves
/// the maintenance to its window (logged), since nothing is lost by waiting for it.
pub async fn observe(
    io: &Io<'_>,
    namespace: &str,
    slice: &TpuSlice,
) -> Result<Option<String>, ReconcileError> {
    let awaiting = slice.status.as_ref().and_then(|old| awaited(&slice.spec, old));
    let Some((dir, since)) = awaiting else {
        return Ok(None);
    };
    let Some(uri) = parse_gs_uri(&dir) else {
        return Ok(None);
    };
    let listed = io
        .storage_for(namespace)
        .list_objects(uri.bucket, uri.path, MAX_LISTED)
        .await;
    match listed {
        Ok(objects) => Ok(committed_since(&dir, since, &objects)),
        Err(err) if err.is_retryable() => Err(ReconcileError::gcp("list the checkpoint directory")(err)),
        Err(err) => {
            tracing::warn!(error = %err, dir, "cannot read CHECKPOINT_DIR: the maintenance starts at its window");
            Ok(None)
        }
    }
}

/// Node `n`'s maintenance is to be started now: its notice is pending and reschedulable, the
/// node carries the checkpoint request for that window, and `committed` (this pass's
/// [`observe`]) found the checkpoint written since.
pub fn start_due(n: &Node, committed: Option<&str>) -> bool {
    let Some(m) = upcoming_maintenance(n) else {
        return false;
    };
    let asked = super::maintenance::carries_request(n, m.window_start_time.as_ref());
    committed.is_some() && !m.ongoing() && m.can_reschedule && asked
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_api::tpu_slice::MaintenanceStatus;

    fn object(name: &str, updated: &str) -> ObjectInfo {
        ObjectInfo {
            name: name.into(),
            updated: updated.into(),
            ..ObjectInfo::default()
        }
    }

    fn at(t: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(t).unwrap().to_utc()
    }

    #[test]
    fn only_a_commit_marker_written_since_the_request_counts() {
        let dir = "gs://b/run/checkpoints/";
        let since = at("2026-03-02T10:00:00Z");
        let objects = [
            object("run/checkpoints/100/_CHECKPOINT_METADATA", "2026-03-02T09:58:00Z"),
            object("run/checkpoints/150/state/shard-0", "2026-03-02T10:00:05Z"),
        ];
        assert_eq!(
            committed_since(dir, since, &objects),
            None,
            "an older commit, and a step still being written"
        );
        let mut objects = objects.to_vec();
        objects.push(object(
            "run/checkpoints/150/_CHECKPOINT_METADATA",
            "2026-03-02T10:00:09Z",
        ));
        objects.push(object(
            "run/checkpoints/90/commit_success.txt",
            "2026-03-02T10:00:01Z",
        ));
        assert_eq!(
            committed_since(dir, since, &objects).as_deref(),
            Some("gs://b/run/checkpoints/150/"),
            "the newest commit since the request"
        );
    }

    #[test]
    fn awaited_only_while_a_reschedulable_window_was_asked_for_and_not_started() {
        let mut spec: TpuSliceSpec = serde_json::from_value(serde_json::json!({
            "zone": "us-central2-b", "acceleratorType": "v5litepod-8",
            "runtimeVersion": "tpu-ubuntu2204-base",
            "workload": {"image": "trainer", "env": [{"name": "CHECKPOINT_DIR", "value": "gs://b/c/"}]},
        }))
        .unwrap();
        let asked =
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-03-02T10:00:00Z".parse().unwrap());
        let mut st = TpuSliceStatus {
            maintenance: Some(MaintenanceStatus {
                state: MaintenanceState::Pending,
                can_reschedule: true,
                checkpoint_request_time: Some(asked),
                ..MaintenanceStatus::default()
            }),
            ..TpuSliceStatus::default()
        };
        assert_eq!(
            awaited(&spec, &st),
            Some(("gs://b/c/".to_string(), at("2026-03-02T10:00:00Z")))
        );
        let m = st.maintenance.as_mut().unwrap();
        m.can_reschedule = false;
        assert_eq!(awaited(&spec, &st), None, "Google does not let it move");
        let m = st.maintenance.as_mut().unwrap();
        m.can_reschedule = true;
        m.start_request_time = m.checkpoint_request_time.clone();
        assert_eq!(awaited(&spec, &st), None, "already started");
        st.maintenance.as_mut().unwrap().start_request_time = None;
        spec.maintenance = Some(serde_json::from_value(serde_json::json!({"startEarly": "Never"})).unwrap());
        assert_eq!(awaited(&spec, &st), None, "the spec says never");
        spec.maintenance = None;
        spec.workload.as_mut().unwrap().env.clear();
        assert_eq!(awaited(&spec, &st), None, "nowhere to look for the commit");
    }
}
