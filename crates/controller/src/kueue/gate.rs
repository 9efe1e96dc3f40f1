//! A Workload's status as the gate a pass obeys, and the status that releases an evicted
//! Workload's reservation (pure). The rules are Kueue's (tests/kueue/README.md, observed against
//! v0.17.0): quota is held while `status.admission` is set; `Admitted` says the work may run;
//! `Evicted` asks the owner to stop, and the reservation is the owner's to release.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::{Value, json};

use super::workload::{Workload, conditions as types};
use crate::runtime::clock::k8s_time;

/// The eviction reason of a Workload deleted by someone else (by hand, or by the garbage
/// collector of a foreground deletion): not Kueue's, but it withdraws the admission all the same.
pub const DELETED: &str = "WorkloadDeleted";

/// What Kueue allows the object's cloud work to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// No Workload yet: it is created, and nothing runs until Kueue admits it.
    Missing,
    /// Waiting for quota. `message` is Kueue's own (why it is not admitted yet).
    Pending { message: String },
    /// Admitted through this ClusterQueue: the work may run.
    Admitted { cluster_queue: String },
    /// Kueue asks the work to stop: `reason` is the eviction's (`Preempted`, `Deactivated`,
    /// `ClusterQueueStopped`, ...), `message` Kueue's. A Workload being deleted ([`DELETED`])
    /// stops the work as well: its quota stays reserved (the operator's finalizer) until nothing
    /// bills, and then it is let go instead of released.
    Evicted { reason: String, message: String },
    /// A Workload of that name exists but is not the one the object needs (another owner, or
    /// another queue, size or shape: written by someone else, or the object changed): whatever
    /// Kueue decided about it says nothing about this object's work, which is stopped; the
    /// Workload is deleted and written again.
    Foreign { why: String },
}

impl Gate {
    /// The gate `workload` sets (`None`: it does not exist).
    pub fn of(workload: Option<&Workload>) -> Gate {
        let Some(wl) = workload else {
            return Gate::Missing;
        };
        if wl.metadata.deletion_timestamp.is_some() {
            return Gate::Evicted {
                reason: DELETED.into(),
                message: "the Workload is being deleted; its quota stays reserved until nothing bills".into(),
            };
        }
        let conditions = wl.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
        let holds = |t: &str| condition(conditions, t).is_some_and(|c| c.status == "True");
        let Some(admission) = wl.status.as_ref().and_then(|s| s.admission.as_ref()) else {
            return Gate::Pending {
                message: pending_message(conditions),
            };
        };
        if holds(types::EVICTED) {
            let evicted = condition(conditions, types::EVICTED);
            return Gate::Evicted {
                reason: evicted.map(|c| c.reason.clone()).unwrap_or_default(),
                message: evicted.map(|c| c.message.clone()).unwrap_or_default(),
            };
        }
        if wl.spec.active == Some(false) {
            // Deactivated and not yet marked Evicted by Kueue: stop all the same.
            return Gate::Evicted {
                reason: "Deactivated".into(),
                message: "the Workload is deactivated (spec.active is false)".into(),
            };
        }
        if holds(types::ADMITTED) {
            return Gate::Admitted {
                cluster_queue: admission.cluster_queue.clone(),
            };
        }
        Gate::Pending {
            message: format!(
                "quota reserved in ClusterQueue {}; waiting for its admission checks",
                admission.cluster_queue
            ),
        }
    }

    pub fn admitted(&self) -> bool {
        matches!(self, Gate::Admitted { .. })
    }
}

/// When Kueue admitted the Workload (its `Admitted` condition's transition), while it is.
pub fn admitted_since(wl: &Workload) -> Option<DateTime<Utc>> {
    let conditions = &wl.status.as_ref()?.conditions;
    let admitted = condition(conditions, types::ADMITTED).filter(|c| c.status == "True")?;
    DateTime::from_timestamp(admitted.last_transition_time.0.as_second(), 0)
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Why a Workload without a reservation waits: Kueue's `QuotaReserved` message (e.g.
/// "couldn't assign flavors to pod set hosts: insufficient unused quota ...", "LocalQueue x
/// doesn't exist"), or that Kueue has not looked at it yet.
fn pending_message(conditions: &[Condition]) -> String {
    condition(conditions, types::QUOTA_RESERVED)
        .filter(|c| !c.message.is_empty())
        .map(|c| c.message.clone())
        .unwrap_or_else(|| "waiting for Kueue to consider the Workload".into())
}

/// The status merge patch that releases an evicted Workload's reservation, as Kueue's own job
/// integrations do once their job stopped (`pkg/workload/workload.go`,
/// `UnsetQuotaReservationWithCondition`): `admission` removed, `QuotaReserved` False (reason
/// `Pending`, the eviction's message), `Admitted` False (`NoReservation`), and `Requeued` True
/// for the reasons Kueue requeues on (`Preempted`, `NodeFailures`), False otherwise. A merge patch
/// replaces the whole condition list, so the others are carried over unchanged; the
/// `resourceVersion` makes it fail rather than overwrite a status Kueue changed meanwhile.
pub fn release_patch(wl: &Workload, reason: &str, message: &str, now: DateTime<Utc>) -> Value {
    let status = wl.status.clone().unwrap_or_default();
    let requeued = if matches!(reason, "Preempted" | "NodeFailures") {
        "True"
    } else {
        "False"
    };
    let mut conditions = status.conditions;
    let generation = wl.metadata.generation;
    let mut set = |type_: &str, status: &str, reason: &str, message: &str| {
        let fresh = Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: generation,
            last_transition_time: k8s_time(now),
        };
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) if c.status == status => {
                c.reason = fresh.reason;
                c.message = fresh.message;
                c.observed_generation = generation;
            }
            Some(c) => *c = fresh,
            None => conditions.push(fresh),
        }
    };
    set(types::QUOTA_RESERVED, "False", "Pending", message);
    set(
        types::ADMITTED,
        "False",
        "NoReservation",
        "The workload has no reservation",
    );
    set(types::REQUEUED, requeued, reason, message);
    json!({
        "metadata": { "resourceVersion": wl.metadata.resource_version },
        "status": { "admission": null, "conditions": conditions },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kueue::workload::{Admission, WorkloadSpec, WorkloadStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: Some(1),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }
    }

    fn workload(admission: bool, conditions: Vec<Condition>) -> Workload {
        let mut wl = Workload::new("tpuslice-a", WorkloadSpec::default());
        wl.metadata.resource_version = Some("42".into());
        wl.status = Some(WorkloadStatus {
            admission: admission.then(|| Admission {
                cluster_queue: "cq".into(),
                pod_set_assignments: Vec::new(),
            }),
            conditions,
        });
        wl
    }

    #[test]
    fn the_gate_follows_kueues_conditions() {
        assert_eq!(Gate::of(None), Gate::Missing);
        let pending = workload(
            false,
            vec![cond("QuotaReserved", "False", "Pending", "insufficient quota")],
        );
        assert_eq!(
            Gate::of(Some(&pending)),
            Gate::Pending {
                message: "insufficient quota".into()
            }
        );
        let admitted = workload(
            true,
            vec![
                cond("QuotaReserved", "True", "QuotaReserved", ""),
                cond("Admitted", "True", "Admitted", ""),
            ],
        );
        assert_eq!(
            Gate::of(Some(&admitted)),
            Gate::Admitted {
                cluster_queue: "cq".into()
            }
        );
        let mut evicted = admitted.clone();
        let st = evicted.status.as_mut().unwrap();
        st.conditions.push(cond(
            "Evicted",
            "True",
            "Preempted",
            "Preempted to accommodate a workload",
        ));
        assert_eq!(
            Gate::of(Some(&evicted)),
            Gate::Evicted {
                reason: "Preempted".into(),
                message: "Preempted to accommodate a workload".into()
            }
        );
        let reserved_only = workload(true, vec![cond("QuotaReserved", "True", "QuotaReserved", "")]);
        assert!(matches!(Gate::of(Some(&reserved_only)), Gate::Pending { .. }));
    }

    #[test]
    fn a_workload_being_deleted_stops_the_work_even_while_admitted() {
        let mut wl = workload(
            true,
            vec![
                cond("QuotaReserved", "True", "QuotaReserved", ""),
                cond("Admitted", "True", "Admitted", ""),
            ],
        );
        wl.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(matches!(Gate::of(Some(&wl)), Gate::Evicted { reason, .. } if reason == DELETED));
    }

    #[test]
    fn an_evicted_condition_left_false_from_an_earlier_eviction_does_not_stop_the_work() {
        let wl = workload(
            true,
            vec![
                cond("Admitted", "True", "Admitted", ""),
                cond("Evicted", "False", "QuotaReserved", "Previously: Preempted"),
            ],
        );
        assert!(Gate::of(Some(&wl)).admitted());
    }

    #[test]
    fn the_release_unsets_admission_and_keeps_the_other_conditions() {
        let wl = workload(
            true,
            vec![
                cond("QuotaReserved", "True", "QuotaReserved", "reserved"),
                cond("Admitted", "True", "Admitted", ""),
                cond("Evicted", "True", "Preempted", "by x"),
            ],
        );
        let patch = release_patch(&wl, "Preempted", "by x", Utc::now());
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert!(patch["status"]["admission"].is_null());
        let conditions = patch["status"]["conditions"].as_array().unwrap();
        let find = |t: &str| conditions.iter().find(|c| c["type"] == t).unwrap();
        assert_eq!(find("QuotaReserved")["status"], "False");
        assert_eq!(find("QuotaReserved")["reason"], "Pending");
        assert_eq!(find("Admitted")["reason"], "NoReservation");
        assert_eq!(find("Requeued")["status"], "True");
        assert_eq!(
            find("Evicted")["status"],
            "True",
            "Kueue's own condition is left as it is"
        );
        let deactivated = release_patch(&wl, "Deactivated", "off", Utc::now());
        let conditions = deactivated["status"]["conditions"].as_array().unwrap();
        let requeued = conditions.iter().find(|c| c["type"] == "Requeued").unwrap();
        assert_eq!(requeued["status"], "False");
    }
}
