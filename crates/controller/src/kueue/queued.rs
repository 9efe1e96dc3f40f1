//! An object queued through Kueue (its `kueue.x-k8s.io/queue-name` label, with the operator's
//! Kueue integration on): what a pass reads of its Workload, and the Kubernetes writes a plan asks
//! for (create the Workload, release an evicted one's reservation, delete one that is not the
//! object's or that its finished work no longer needs). The same for every gated kind: a TpuSlice
//! and a TrainingPipeline's training stage differ only in what they hold ([`Demand`]) and in
//! what their plan stops on an eviction.

// `ReconcileError` (shared, crate::runtime::error) carries a `GcpError` inline; boxing it is a
// crate-wide decision, not one for this module.
#![allow(clippy::result_large_err)]

use chrono::{DateTime, Utc};
use kube::{Resource, ResourceExt};
use tpu_operator_api::{conditions::reasons, kueue::KueueStatus};

use super::{
    Gate, PRIORITY_CLASS_LABEL, QUEUE_LABEL, client,
    demand::{self, Demand},
    eta::Lines,
    follow::{self, PriorityChange},
    gate,
    waits::{Awaited, Waiters},
    workload::{Workload, WorkloadSpec},
};
use crate::{
    reconcile::handles::{Io, Kept, Settings},
    runtime::{
        clock::k8s_time,
        error::{ReconcileError, Result},
    },
};

mod writes;

pub use writes::{Write, release_on_delete, write};

/// What a pass read of the object's Workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Queued {
    pub workload: String,
    pub local_queue: String,
    pub gate: Gate,
    /// The Workload as read (the release patch is built on it).
    pub found: Option<Workload>,
    /// The Workload this object would write (`None`: the spec has no valid shape): compared with
    /// `found`, and what is created when there is none.
    pub desired: Option<WorkloadSpec>,
    /// Position in the LocalQueue while pending (1 = next), when Kueue's visibility API serves it.
    pub position: Option<i32>,
    /// When the Workload will likely be admitted, while it waits at `position` ([`eta`](super::eta)).
    pub estimated_start: Option<DateTime<Utc>>,
    /// The priority class the label names (its value read only to create the Workload or change
    /// its class), or the message naming a class that does not exist.
    pub priority: Result<Option<(String, i32)>, String>,
}

impl Queued {
    /// `status.kueue` after a pass that read this, on top of `before`: the Workload, queue and
    /// position as read, `newly_evicted` added to the evictions, `stopped` (a stop counted for
    /// Kueue) kept until the next admission.
    pub fn status(&self, before: KueueStatus, newly_evicted: bool, stopped: bool) -> KueueStatus {
        let admitted = self.gate.admitted();
        KueueStatus {
            workload: self.workload.clone(),
            local_queue: self.local_queue.clone(),
            cluster_queue: self.cluster_queue().map(str::to_string),
            position: self.position,
            estimated_start_time: self.estimated_start.map(k8s_time),
            admitted,
            evictions: before.evictions + i32::from(newly_evicted),
            stopped: !admitted && stopped,
            ..before
        }
    }

    /// The ClusterQueue that admitted the Workload, while it is admitted.
    pub fn cluster_queue(&self) -> Option<&str> {
        match &self.gate {
            Gate::Admitted { cluster_queue } => Some(cluster_queue),
            _ => None,
        }
    }

    /// The Kubernetes reason and the message of an object Kueue does not let run now (`None`:
    /// admitted), e.g. "waiting in Kueue LocalQueue q (position 2): <Kueue's message>".
    pub fn holding(&self) -> Option<(&'static str, String)> {
        Some(match &self.gate {
            Gate::Admitted { .. } => return None,
            Gate::Missing => (reasons::QUEUED_IN_KUEUE, "not admitted by Kueue yet".to_string()),
            Gate::Pending { message } => {
                let position = match (self.position, self.estimated_start) {
                    (Some(p), Some(eta)) => format!(
                        " (position {p}, estimated start {})",
                        eta.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    ),
                    (Some(p), None) => format!(" (position {p})"),
                    _ => String::new(),
                };
                (
                    reasons::QUEUED_IN_KUEUE,
                    format!(
                        "waiting in Kueue LocalQueue {}{position}: {message}",
                        self.local_queue
                    ),
                )
            }
            Gate::Evicted { reason, message } if reason == gate::DELETED => (
                reasons::EVICTED,
                format!("Workload {} deleted: {message}", self.workload),
            ),
            Gate::Evicted { reason, message } => (
                reasons::EVICTED,
                format!("evicted by Kueue ({reason}): {message}"),
            ),
            Gate::Foreign { why } => (reasons::QUEUED_IN_KUEUE, format!("not admitted by Kueue: {why}")),
        })
    }
}

/// The kinds Kueue gates: the object and the prefix of its Workload's name.
pub trait Gated: Resource<DynamicType = ()> + ResourceExt + 'static {
    /// `tpuslice`, `trainingpipeline`: the Workload's name starts with it.
    const WORKLOAD_PREFIX: &'static str;
}

/// The LocalQueue that gates the object, when Kueue does (integration on): the one its label
/// names, else the operator's default queue. An empty label is no label: it cannot be used to
/// step around the default.
pub fn local_queue<'a, K: Gated>(obj: &'a K, settings: Settings<'a>) -> Option<&'a str> {
    if !settings.config.kueue {
        return None;
    }
    obj.labels()
        .get(QUEUE_LABEL)
        .map(String::as_str)
        .filter(|q| !q.is_empty())
        .or(settings.config.kueue_default_queue.as_deref())
}

/// The Workload's name: the object's kind and name, cut so the whole stays a valid name, and 5
/// characters of its uid so an object re-created under the same name never reads its
/// predecessor's Workload.
pub fn workload_name<K: Gated>(obj: &K) -> String {
    let name: String = obj.name_any().chars().take(40).collect();
    let uid: String = obj.uid().unwrap_or_default().chars().take(5).collect();
    format!(
        "{}-{}-{uid}",
        K::WORKLOAD_PREFIX,
        name.trim_end_matches(['-', '.'])
    )
}

/// Reads the object's Workload and what its gate needs: the position while pending, the priority
/// class while it does not exist yet. A Workload that is not exactly the one this object would
/// write ([`demand::mismatch`]) gates nothing: [`Gate::Foreign`]. The object's own Workload
/// follows its priority-class label in place ([`follow_workload`]). `None`: not gated by Kueue.
/// `demand`: what the object holds while it runs (`None`: the spec is invalid, which its plan
/// reports).
pub async fn observe<K: Gated>(obj: &K, io: &Io<'_>, demand: Option<Demand>) -> Result<Option<Queued>> {
    let Some(queue) = local_queue(obj, io.settings) else {
        return Ok(None);
    };
    let workload = workload_name(obj);
    let found = client::get(io.client, &namespace(obj)?, &workload)
        .await
        .map_err(ReconcileError::kueue("read the Kueue Workload"))?;
    let class = obj.labels().get(PRIORITY_CLASS_LABEL).map(String::as_str);
    // The class's value is read to create the Workload or to change its class; Kueue itself
    // rewrites the value of referencing Workloads when a class's value changes.
    let mut priority = match (&found, class) {
        (None, Some(class)) => class_value(io, class).await?,
        (_, class) => Ok(class.map(|c| (c.to_string(), 0))),
    };
    let desired = demand.map(|demand| {
        let class = priority.as_ref().ok().and_then(Option::as_ref);
        demand::workload_spec(&demand, queue, class.map(|(name, value)| (name.as_str(), *value)))
    });
    let (found, gate) = gate_of(obj, io, found, desired.as_ref(), class, &mut priority).await?;
    let ns = namespace(obj)?;
    let position = match gate {
        Gate::Pending { .. } => client::position(io.client, &ns, queue, &workload).await,
        _ => None,
    };
    let estimated_start = line(io, &ns, queue, &workload, found.as_ref(), &gate, position);
    // What the object now awaits besides its Workload: a missing class to appear, its line to move.
    let mut awaited = Vec::new();
    if let (Gate::Missing, Some(class), Err(_)) = (&gate, class, &priority) {
        awaited.push(Awaited::PriorityClass(class.to_string()));
    }
    if matches!(gate, Gate::Pending { .. }) {
        let (namespace, queue) = (ns.clone(), queue.to_string());
        awaited.push(Awaited::Queue { namespace, queue });
    }
    waiters::<K>(io.kept).set(&ns, &obj.name_any(), awaited);
    Ok(Some(Queued {
        workload,
        local_queue: queue.to_string(),
        gate,
        found,
        desired,
        position,
        estimated_start,
        priority,
    }))
}

/// Records what the Workload tells of its LocalQueue's line ([`eta::Lines`]) and estimates its
/// admission while it waits at `position`. Kueue's times are wall-clock time ([`eta`](super::eta)).
fn line(
    io: &Io<'_>,
    namespace: &str,
    queue: &str,
    workload: &str,
    found: Option<&Workload>,
    gate: &Gate,
    position: Option<i32>,
) -> Option<DateTime<Utc>> {
    let lines = io.kept.shared.get_or_default::<Lines>();
    let now = Utc::now();
    if gate.admitted() {
        let since = found.and_then(gate::admitted_since).unwrap_or(now);
        lines.admitted(namespace, queue, workload, since);
        return None;
    }
    lines.ended(namespace, queue, workload, now);
    if !matches!(gate, Gate::Pending { .. }) {
        return None;
    }
    lines.waiting(namespace, queue, workload);
    lines.estimate(namespace, queue, position?, now)
}

/// The gate the Workload `found` sets for `obj`: [`Gate::Foreign`] when it is not the one the
/// object would write ([`demand::mismatch`]), else as Kueue decided, once the object's own
/// Workload is kept in line ([`follow_workload`]; a label naming a missing class turns
/// `priority` into the message saying so). Returns the Workload as it now is.
async fn gate_of<K: Gated>(
    obj: &K,
    io: &Io<'_>,
    found: Option<Workload>,
    desired: Option<&WorkloadSpec>,
    class: Option<&str>,
    priority: &mut Result<Option<(String, i32)>, String>,
) -> Result<(Option<Workload>, Gate)> {
    let foreign = found
        .as_ref()
        .zip(desired)
        .and_then(|(wl, desired)| demand::mismatch(wl, desired, &obj.uid().unwrap_or_default()));
    if let Some(why) = foreign {
        let workload = workload_name(obj);
        let why = format!("Workload {workload} is not this {}'s: {why}", K::kind(&()));
        return Ok((found, Gate::Foreign { why }));
    }
    let Some(wl) = found else {
        return Ok((None, Gate::Missing));
    };
    let (wl, missing) = follow_workload(io, wl, class).await?;
    if let Some(message) = missing {
        *priority = Err(message);
    }
    let gate = Gate::of(Some(&wl));
    Ok((Some(wl), gate))
}

/// What the objects of kind `K` await ([`super::waits`]), shared by their passes and their
/// watches.
pub fn waiters<K: Gated>(kept: Kept<'_>) -> std::sync::Arc<Waiters<K>> {
    kept.shared.get_or_default::<Waiters<K>>()
}

/// The value of WorkloadPriorityClass `class`, or the message naming it when it does not exist.
async fn class_value(io: &Io<'_>, class: &str) -> Result<Result<Option<(String, i32)>, String>> {
    let value = client::priority(io.client, class)
        .await
        .map_err(ReconcileError::kueue("read the WorkloadPriorityClass"))?;
    Ok(match value {
        Some(value) => Ok(Some((class.to_string(), value))),
        None => Err(format!(
            "WorkloadPriorityClass {class} (label {PRIORITY_CLASS_LABEL}) does not exist: create it or fix the label"
        )),
    })
}

/// Keeps the object's own Workload in line ([`follow`]): the priority class its label names,
/// changed in place as Kueue's own integrations do when a job is relabelled (replacing the
/// Workload would stop the work it admits), and the operator's finalizer. Returns the Workload as
/// it now is and, when the label names a class that does not exist, the message saying so (the
/// Workload keeps its class meanwhile).
async fn follow_workload(
    io: &Io<'_>,
    wl: Workload,
    label: Option<&str>,
) -> Result<(Workload, Option<String>)> {
    if wl.metadata.deletion_timestamp.is_some() {
        return Ok((wl, None));
    }
    let mut change = follow::priority_change(&wl, label);
    let mut missing = None;
    let value = match &change {
        PriorityChange::Set(class) => match class_value(io, class).await? {
            Ok(found) => found.map_or(0, |(_, value)| value),
            Err(message) => {
                missing = Some(message);
                change = PriorityChange::Keep;
                0
            }
        },
        PriorityChange::Later(why) => {
            tracing::info!(workload = wl.metadata.name.as_deref(), "{why}");
            0
        }
        PriorityChange::Keep | PriorityChange::Clear => 0,
    };
    let Some(patch) = follow::patch(&wl, &change, value) else {
        return Ok((wl, missing));
    };
    let written = client::patch(io.client, &wl, &patch)
        .await
        .map_err(ReconcileError::kueue("keep the Kueue Workload in line"))?;
    Ok((written, missing))
}

/// The object is being deleted: it awaits nothing any more.
pub fn forget<K: Gated>(obj: &K, settings: Settings<'_>, kept: Kept<'_>) {
    if local_queue(obj, settings).is_some() {
        let namespace = obj.namespace().unwrap_or_default();
        waiters::<K>(kept).set(&namespace, &obj.name_any(), Vec::new());
    }
}

fn namespace<K: Gated>(obj: &K) -> Result<String> {
    obj.namespace()
        .ok_or(ReconcileError::MissingMetadata("namespace"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_api::{TpuSliceSpec, tpu_slice::TpuSlice};

    #[test]
    fn the_workload_name_is_valid_and_tied_to_the_object() {
        let mut slice = TpuSlice::new(&"a".repeat(250), TpuSliceSpec::default());
        slice.metadata.uid = Some("0123456789".into());
        let name = workload_name(&slice);
        assert!(name.len() <= 63, "{name}");
        assert!(
            name.starts_with("tpuslice-aaaa") && name.ends_with("-01234"),
            "{name}"
        );
    }
}
