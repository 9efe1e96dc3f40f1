//! What the object's own Workload is kept in line with while it lives, as Kueue's own job
//! integrations keep theirs (pure): the priority class the object's label names, changed in place
//! (kueue v0.17.0 `pkg/controller/jobframework/reconciler.go`, `UpdateWorkloadPriority`), never
//! by writing a new Workload, which would stop the work it admits; and the operator's finalizer
//! ([`IN_USE_FINALIZER`]), on a Workload written before the operator set it.
//!
//! The Workload API decides what may change (`apis/kueue/v1beta2/workload_types.go`, the CEL
//! rules on `Workload`): while quota is reserved a WorkloadPriorityClass reference may be renamed,
//! but not added or removed. Such a change waits until the Workload is queued again (evicted and
//! released, or pending), as Kueue's own webhook refuses adding a class to a running job.

use serde_json::{Value, json};

use super::{
    IN_USE_FINALIZER,
    workload::{PriorityClassRef, Workload, conditions},
};

/// What the label asks of the Workload's priority class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PriorityChange {
    /// The Workload already has the class the label names (or neither has one), or its class is
    /// not a WorkloadPriorityClass (not this operator's to change).
    Keep,
    /// Point the Workload at this WorkloadPriorityClass (and its value).
    Set(String),
    /// The label was removed: the Workload goes back to no class, priority 0.
    Clear,
    /// The Workload API does not allow the change while quota is reserved; it is made once the
    /// Workload is queued again. The text says which.
    Later(String),
}

/// The change that brings `found`'s priority class to what the object's label names (`label`).
pub fn priority_change(found: &Workload, label: Option<&str>) -> PriorityChange {
    let current = found.spec.priority_class_ref.as_ref();
    if current.is_some_and(|c| !is_workload_priority_class(c)) {
        return PriorityChange::Keep;
    }
    let reserved = quota_reserved(found);
    match (current.map(|c| c.name.as_str()), label) {
        (now, wanted) if now == wanted => PriorityChange::Keep,
        (Some(_), Some(wanted)) => PriorityChange::Set(wanted.to_string()),
        (None, Some(wanted)) if reserved => PriorityChange::Later(format!(
            "priority class {wanted} applies once the Workload is queued again: Kueue does not let a class be added to an admitted Workload"
        )),
        (None, Some(wanted)) => PriorityChange::Set(wanted.to_string()),
        (Some(now), None) if reserved => PriorityChange::Later(format!(
            "priority class {now} stays until the Workload is queued again: Kueue does not let a class be removed from an admitted Workload"
        )),
        (Some(_), None) => PriorityChange::Clear,
        (None, None) => PriorityChange::Keep,
    }
}

/// The merge patch bringing `found` in line: the priority `change` (`value`: the class's value,
/// for [`PriorityChange::Set`]) and the finalizer where it lacks it (conditional on the
/// `resourceVersion` read: the finalizer list is written whole); `None` when nothing is to be
/// written.
pub fn patch(found: &Workload, change: &PriorityChange, value: i32) -> Option<Value> {
    let mut patch = priority_patch(change, value).unwrap_or_else(|| json!({}));
    let finalizers = found.metadata.finalizers.clone().unwrap_or_default();
    if !finalizers.iter().any(|f| f == IN_USE_FINALIZER) {
        let mut held = finalizers;
        held.push(IN_USE_FINALIZER.to_string());
        patch["metadata"] = json!({
            "finalizers": held,
            "resourceVersion": found.metadata.resource_version,
        });
    }
    (patch != json!({})).then_some(patch)
}

/// The merge patch of the Workload's spec for `change`.
fn priority_patch(change: &PriorityChange, value: i32) -> Option<Value> {
    match change {
        PriorityChange::Set(name) => Some(json!({"spec": {
            "priorityClassRef": class_ref(name),
            "priority": value,
        }})),
        PriorityChange::Clear => Some(json!({"spec": {"priorityClassRef": null, "priority": 0}})),
        PriorityChange::Keep | PriorityChange::Later(_) => None,
    }
}

/// The reference to WorkloadPriorityClass `name`, as the Workload's spec carries it.
pub fn class_ref(name: &str) -> PriorityClassRef {
    PriorityClassRef {
        group: "kueue.x-k8s.io".into(),
        kind: "WorkloadPriorityClass".into(),
        name: name.to_string(),
    }
}

fn is_workload_priority_class(c: &PriorityClassRef) -> bool {
    c.group == "kueue.x-k8s.io" && c.kind == "WorkloadPriorityClass"
}

/// Whether Kueue reserves quota for the Workload (`QuotaReserved` True): the state in which the
/// Workload API freezes most of its spec.
fn quota_reserved(wl: &Workload) -> bool {
    wl.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == conditions::QUOTA_RESERVED && c.status == "True")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kueue::workload::{WorkloadSpec, WorkloadStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn workload(class: Option<&str>, reserved: bool) -> Workload {
        let mut wl = Workload::new(
            "tpuslice-a",
            WorkloadSpec {
                priority_class_ref: class.map(class_ref),
                ..Default::default()
            },
        );
        wl.status = Some(WorkloadStatus {
            admission: None,
            conditions: vec![Condition {
                type_: conditions::QUOTA_RESERVED.into(),
                status: if reserved { "True" } else { "False" }.into(),
                reason: String::new(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            }],
        });
        wl
    }

    #[test]
    fn a_renamed_class_is_set_in_place_even_while_admitted() {
        let change = priority_change(&workload(Some("low"), true), Some("high"));
        assert_eq!(change, PriorityChange::Set("high".into()));
        let patch = priority_patch(&change, 1000).unwrap();
        assert_eq!(patch["spec"]["priorityClassRef"]["name"], "high");
        assert_eq!(patch["spec"]["priorityClassRef"]["kind"], "WorkloadPriorityClass");
        assert_eq!(patch["spec"]["priority"], 1000);
    }

    #[test]
    fn adding_or_removing_a_class_waits_while_quota_is_reserved() {
        assert!(matches!(
            priority_change(&workload(None, true), Some("high")),
            PriorityChange::Later(m) if m.contains("added")
        ));
        assert!(matches!(
            priority_change(&workload(Some("low"), true), None),
            PriorityChange::Later(m) if m.contains("removed")
        ));
        assert_eq!(
            priority_change(&workload(None, false), Some("high")),
            PriorityChange::Set("high".into())
        );
        let clear = priority_change(&workload(Some("low"), false), None);
        assert_eq!(clear, PriorityChange::Clear);
        let patch = priority_patch(&clear, 0).unwrap();
        assert!(patch["spec"]["priorityClassRef"].is_null());
        assert_eq!(patch["spec"]["priority"], 0);
    }

    #[test]
    fn a_workload_without_the_finalizer_gets_it_and_nothing_else_is_written_twice() {
        let mut wl = workload(Some("low"), true);
        wl.metadata.resource_version = Some("7".into());
        wl.metadata.finalizers = Some(vec!["someone/else".into()]);
        let patch = patch(&wl, &PriorityChange::Keep, 0).unwrap();
        assert_eq!(
            patch["metadata"]["finalizers"],
            json!(["someone/else", IN_USE_FINALIZER])
        );
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert!(patch.get("spec").is_none());
        wl.metadata.finalizers = Some(vec![IN_USE_FINALIZER.into()]);
        assert_eq!(super::patch(&wl, &PriorityChange::Keep, 0), None);
        let both = super::patch(&wl, &PriorityChange::Set("high".into()), 9).unwrap();
        assert!(both.get("metadata").is_none());
        assert_eq!(both["spec"]["priority"], 9);
    }

    #[test]
    fn the_same_class_or_someone_elses_kind_of_class_is_kept() {
        assert_eq!(
            priority_change(&workload(Some("low"), true), Some("low")),
            PriorityChange::Keep
        );
        assert_eq!(priority_change(&workload(None, true), None), PriorityChange::Keep);
        let mut pod_class = workload(None, false);
        pod_class.spec.priority_class_ref = Some(PriorityClassRef {
            group: "scheduling.k8s.io".into(),
            kind: "PriorityClass".into(),
            name: "system".into(),
        });
        assert_eq!(priority_change(&pod_class, Some("high")), PriorityChange::Keep);
        assert_eq!(priority_patch(&PriorityChange::Keep, 5), None);
    }
}
