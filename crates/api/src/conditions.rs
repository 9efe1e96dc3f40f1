//! Condition types, reasons and helpers: the status contract (kstatus-compatible, so Flux and
//! Argo CD read it without custom health code).
//!
//! Every kind publishes the triple `Ready` / `Reconciling` / `Stalled`:
//! - `Ready=True` only at the desired end state (slice READY and healthy, batch or pipeline
//!   succeeded);
//! - `Reconciling=True` while creating, queued, running or cancelling;
//! - `Stalled=True` on a terminal failure or a policy refusal, always with `Ready=False`.
//!
//! Build the triple with [`set_kstatus`] so the three never contradict each other.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition types (`Condition.type`).
pub mod types {
    /// The desired end state is reached.
    pub const READY: &str = "Ready";
    /// The operator is working towards the desired state (kstatus "InProgress").
    pub const RECONCILING: &str = "Reconciling";
    /// The operator cannot make progress without a spec or policy change (kstatus "Failed").
    pub const STALLED: &str = "Stalled";
    /// TpuSlice: capacity was granted (queued resource ACTIVE, or the node was created).
    pub const CAPACITY_AVAILABLE: &str = "CapacityAvailable";
    /// TpuSlice: the node reports health HEALTHY.
    pub const NODE_HEALTHY: &str = "NodeHealthy";
    /// PreprocessBatch / TrainingPipeline: the declared output exists in Cloud Storage.
    pub const OUTPUT_VERIFIED: &str = "OutputVerified";
    /// The cloud object differs from the spec in a field that cannot be patched in place.
    pub const SPEC_DRIFT: &str = "SpecDrift";
    /// TrainingPipeline: the preprocessing stage succeeded (or there is none).
    pub const PREPROCESSED: &str = "Preprocessed";
    /// TrainingPipeline: the training stage succeeded.
    pub const TRAINED: &str = "Trained";
    /// The operator stopped acting on the object (`spec.suspend`).
    pub const SUSPENDED: &str = "Suspended";
    /// TpuSlice: Google announced maintenance of the slice's node (`True` from the notice until
    /// the maintenance is over; the message carries the window).
    pub const MAINTENANCE_PENDING: &str = "MaintenancePending";
}

/// Condition reasons (`Condition.reason`, PascalCase as the API requires).
pub mod reasons {
    /// Waiting for the first reconcile.
    pub const PENDING: &str = "Pending";
    /// A create call is in flight or the cloud object is being created.
    pub const CREATING: &str = "Creating";
    /// A queued resource waits for TPU capacity (WAITING_FOR_RESOURCES).
    pub const WAITING_FOR_CAPACITY: &str = "WaitingForCapacity";
    /// A queued request was accepted and is queued.
    pub const QUEUED: &str = "Queued";
    /// Event: no capacity where the slice asked within the rung's `waitFor`: it moved on to the
    /// next rung or zone of its `capacityPlan`.
    pub const MOVED_ON_CAPACITY_PLAN: &str = "MovedOnCapacityPlan";
    /// Capacity was granted and the nodes are being provisioned.
    pub const PROVISIONING: &str = "Provisioning";
    /// The workload is running.
    pub const RUNNING: &str = "Running";
    /// The slice is up and healthy.
    pub const NODE_READY: &str = "NodeReady";
    /// The node is up but unhealthy or repairing.
    pub const NODE_UNHEALTHY: &str = "NodeUnhealthy";
    /// The workload finished successfully.
    pub const SUCCEEDED: &str = "Succeeded";
    /// The workload failed after its retries.
    pub const FAILED: &str = "Failed";
    /// A spot / preemptible slice was reclaimed.
    pub const PREEMPTED: &str = "Preempted";
    /// A preempted slice is being recreated.
    pub const RECREATING: &str = "Recreating";
    /// A failed attempt is being retried.
    pub const RETRYING: &str = "Retrying";
    /// Preemptions exceeded `preemption.maxRecreations`.
    pub const RECREATIONS_EXHAUSTED: &str = "RecreationsExhausted";
    /// One slice of a multislice was lost more than `multislice.maxSliceRestarts` times.
    pub const SLICE_RESTARTS_EXHAUSTED: &str = "SliceRestartsExhausted";
    /// Retries exceeded `maxRetries`.
    pub const RETRIES_EXHAUSTED: &str = "RetriesExhausted";
    /// The namespace's tenancy policy refuses the spec.
    pub const POLICY_DENIED: &str = "PolicyDenied";
    /// A period budget's threshold was passed (`TpuPolicy` `spec.budgets`): an Event on the
    /// policy and on every object of the namespace holding capacity.
    pub const BUDGET_THRESHOLD_REACHED: &str = "BudgetThresholdReached";
    /// A `SuspendAtCheckpoint` budget action suspended the pipeline after a committed
    /// checkpoint (or holds back what it would create); it resumes when the period ends.
    pub const BUDGET_SUSPENDED: &str = "BudgetSuspended";
    /// Another live TrainingPipeline writes the same model or checkpoint directory: this one
    /// waits until that one finishes or is deleted.
    pub const ARTIFACTS_IN_USE: &str = "ArtifactsInUse";
    /// A `TpuPolicy` is being enforced.
    pub const ENFORCED: &str = "Enforced";
    /// The spec is invalid in a way admission could not see.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// GCP returned PERMISSION_DENIED: the identity the call acted as lacks a role.
    pub const PERMISSION_DENIED: &str = "PermissionDenied";
    /// The operator has no usable credentials: no token (on GKE the metadata server refuses
    /// while the Workload Identity binding is missing), or Google did not accept the token
    /// (UNAUTHENTICATED). Not a missing role: the binding is what to fix.
    pub const CREDENTIALS_UNAVAILABLE: &str = "CredentialsUnavailable";
    /// GCP returned RESOURCE_EXHAUSTED for an exhausted project quota (its details name a quota,
    /// see `tpu_operator_gcp::GcpError::exhaustion`): Stalled, since only a quota increase
    /// helps; TpuSlice still retries the create every few minutes. A stockout is
    /// `WaitingForCapacity` instead.
    pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";
    /// GCP has no capacity right now (stockout) for a non-queued request.
    pub const STOCKOUT: &str = "Stockout";
    /// A create was refused by the project's API rate quota (`RATE_LIMIT_EXCEEDED`; Compute
    /// Engine's 403 `rateLimitExceeded`): retried once the quota's minute window refills.
    pub const RATE_LIMITED: &str = "RateLimited";
    /// A create waits for its turn in the operator's create limiter, which paces each project's
    /// creates to Google's per-minute rate quota: the message gives the place in line and when
    /// the turn is due. Not an error, and nothing was called.
    pub const WAITING_FOR_CREATE_RATE: &str = "WaitingForCreateRate";
    /// A queued request expired (`validUntil` passed).
    pub const QUEUE_EXPIRED: &str = "QueueExpired";
    /// The object is being deleted and its cloud resources cleaned up.
    pub const DELETING: &str = "Deleting";
    /// Running cloud work is being cancelled.
    pub const CANCELLING: &str = "Cancelling";
    /// Cloud work was cancelled.
    pub const CANCELLED: &str = "Cancelled";
    /// `spec.suspend` is set.
    pub const SUSPENDED: &str = "Suspended";
    /// Finished and its cloud resources were removed after `ttlSecondsAfterFinished`.
    pub const REAPED: &str = "Reaped";
    /// `maxRunDuration` elapsed and the slice was deleted.
    pub const MAX_RUN_DURATION_EXCEEDED: &str = "MaxRunDurationExceeded";
    /// `idleTimeout` elapsed without a workload and the slice was deleted.
    pub const IDLE_TIMEOUT: &str = "IdleTimeout";
    /// An existing node was adopted by name.
    pub const ADOPTED: &str = "Adopted";
    /// The node / batch named in the spec or status does not exist.
    pub const NOT_FOUND: &str = "NotFound";
    /// A transient cloud error; retrying with backoff.
    pub const TRANSIENT_ERROR: &str = "TransientError";
    /// The declared output was found.
    pub const OUTPUT_FOUND: &str = "OutputFound";
    /// The workload reported success but the declared output is missing.
    pub const OUTPUT_MISSING: &str = "OutputMissing";
    /// The cloud object matches the spec.
    pub const IN_SYNC: &str = "InSync";
    /// The cloud object drifted from the spec.
    pub const DRIFTED: &str = "Drifted";
    /// There is no preprocessing stage.
    pub const SKIPPED: &str = "Skipped";
    /// Waits for Kueue to admit its Workload (nothing is created in the cloud until then).
    pub const QUEUED_IN_KUEUE: &str = "QueuedInKueue";
    /// Kueue evicted its Workload (preempted, deactivated, ...): the cloud work is stopped and
    /// waits to be admitted again.
    pub const EVICTED: &str = "Evicted";
    /// The WorkloadPriorityClass named by the `kueue.x-k8s.io/priority-class` label does not exist.
    pub const PRIORITY_CLASS_NOT_FOUND: &str = "PriorityClassNotFound";
    /// A call to Kueue's API found nobody to answer it (Kueue's webhook or manager down: the API
    /// server answered 5xx, or nothing answered): retried with backoff.
    pub const KUEUE_UNAVAILABLE: &str = "KueueUnavailable";
    /// Google announced a scheduled maintenance of the node (`MaintenancePending`).
    pub const MAINTENANCE_SCHEDULED: &str = "MaintenanceScheduled";
    /// Google announced an unscheduled (emergency) maintenance of the node.
    pub const MAINTENANCE_UNSCHEDULED: &str = "MaintenanceUnscheduled";
    /// The maintenance is under way.
    pub const MAINTENANCE_ONGOING: &str = "MaintenanceOngoing";
    /// Event: the operator started a reschedulable maintenance itself, right after the
    /// checkpoint it asked for was committed (`spec.maintenance.startEarly`).
    pub const MAINTENANCE_STARTED_EARLY: &str = "MaintenanceStartedEarly";
    /// No maintenance is announced (`MaintenancePending=False`).
    pub const NO_MAINTENANCE: &str = "NoMaintenance";
}

/// Condition status strings.
pub mod status {
    /// `"True"`.
    pub const TRUE: &str = "True";
    /// `"False"`.
    pub const FALSE: &str = "False";
    /// `"Unknown"`.
    pub const UNKNOWN: &str = "Unknown";
}

/// Builds a condition.
pub fn condition(
    type_: &str,
    is_true: bool,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if is_true { status::TRUE } else { status::FALSE }.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation,
        last_transition_time: now,
    }
}

/// Inserts or updates a condition by type, like Go's `meta.SetStatusCondition`:
/// `lastTransitionTime` changes only when `status` flips; reason, message and observedGeneration
/// are always taken from `new`. Returns whether anything changed.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        None => {
            conditions.push(new);
            true
        }
        Some(existing) => {
            let flipped = existing.status != new.status;
            let changed = flipped
                || existing.reason != new.reason
                || existing.message != new.message
                || existing.observed_generation != new.observed_generation;
            if flipped {
                existing.status = new.status;
                existing.last_transition_time = new.last_transition_time;
            }
            existing.reason = new.reason;
            existing.message = new.message;
            existing.observed_generation = new.observed_generation;
            changed
        }
    }
}

/// Removes a condition by type. Returns whether it was present.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    before != conditions.len()
}

/// Finds a condition by type.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether a condition of this type exists with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == status::TRUE)
}

/// Where an object stands, in kstatus terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Desired end state reached: `Ready=True`, `Reconciling=False`, `Stalled=False`.
    Ready,
    /// Working on it: `Ready=False`, `Reconciling=True`, `Stalled=False`.
    Reconciling,
    /// Cannot progress: `Ready=False`, `Reconciling=False`, `Stalled=True`.
    Stalled,
    /// Nothing to do and not at the end state (e.g. suspended): all three False.
    Idle,
}

/// Sets `Ready`, `Reconciling` and `Stalled` consistently from one [`Progress`]. All three get
/// `reason`, so `kubectl get -o yaml` tells one story; the message goes only on the condition
/// that describes the state (the True one; `Ready` when all are False), so `kubectl describe`
/// shows it once rather than three times. Tools read that one: kstatus and Argo CD take the
/// message of the True condition. Returns whether anything changed.
pub fn set_kstatus(
    conditions: &mut Vec<Condition>,
    progress: Progress,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: Time,
) -> bool {
    let (ready, reconciling, stalled) = match progress {
        Progress::Ready => (true, false, false),
        Progress::Reconciling => (false, true, false),
        Progress::Stalled => (false, false, true),
        Progress::Idle => (false, false, false),
    };
    let idle = progress == Progress::Idle;
    let mut changed = false;
    for (type_, value) in [
        (types::READY, ready),
        (types::RECONCILING, reconciling),
        (types::STALLED, stalled),
    ] {
        let describes = value || (idle && type_ == types::READY);
        let says = if describes { message } else { "" };
        let c = condition(type_, value, reason, says, observed_generation, now.clone());
        changed |= set_condition(conditions, c);
    }
    changed
}

/// The condition that describes the state (the one carrying the message, see [`set_kstatus`]):
/// `Stalled` or `Reconciling` when True, else `Ready`.
pub fn describing(conditions: &[Condition]) -> Option<&Condition> {
    [types::STALLED, types::RECONCILING]
        .into_iter()
        .filter_map(|t| find_condition(conditions, t))
        .find(|c| c.status == status::TRUE)
        .or_else(|| find_condition(conditions, types::READY))
}

/// Reads the kstatus triple back (for tests and for the pipeline reading its children).
pub fn progress_of(conditions: &[Condition]) -> Option<Progress> {
    let present = |t| find_condition(conditions, t).is_some();
    if !present(types::READY) && !present(types::RECONCILING) && !present(types::STALLED) {
        return None;
    }
    Some(if is_true(conditions, types::STALLED) {
        Progress::Stalled
    } else if is_true(conditions, types::RECONCILING) {
        Progress::Reconciling
    } else if is_true(conditions, types::READY) {
        Progress::Ready
    } else {
        Progress::Idle
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn set_condition_inserts_then_only_bumps_time_on_status_flip() {
        let mut conds = vec![];
        assert!(set_condition(
            &mut conds,
            condition(types::READY, false, reasons::CREATING, "a", Some(1), t(10))
        ));
        assert_eq!(conds.len(), 1);

        // Same status, new reason: updated, but the transition time stays.
        assert!(set_condition(
            &mut conds,
            condition(types::READY, false, reasons::PROVISIONING, "b", Some(1), t(20))
        ));
        assert_eq!(conds[0].reason, reasons::PROVISIONING);
        assert_eq!(conds[0].message, "b");
        assert_eq!(conds[0].last_transition_time, t(10));

        // Identical: no change reported.
        assert!(!set_condition(
            &mut conds,
            condition(types::READY, false, reasons::PROVISIONING, "b", Some(1), t(30))
        ));
        assert_eq!(conds[0].last_transition_time, t(10));

        // Flip: time bumps.
        assert!(set_condition(
            &mut conds,
            condition(types::READY, true, reasons::NODE_READY, "c", Some(2), t(40))
        ));
        assert_eq!(conds[0].status, "True");
        assert_eq!(conds[0].last_transition_time, t(40));
        assert_eq!(conds[0].observed_generation, Some(2));
        assert_eq!(conds.len(), 1);
    }

    #[test]
    fn kstatus_triple_is_consistent() {
        let mut conds = vec![];
        set_kstatus(
            &mut conds,
            Progress::Reconciling,
            reasons::WAITING_FOR_CAPACITY,
            "queued",
            Some(1),
            t(1),
        );
        assert_eq!(progress_of(&conds), Some(Progress::Reconciling));
        assert!(!is_true(&conds, types::READY));
        assert!(!is_true(&conds, types::STALLED));
        assert_eq!(conds.len(), 3);

        set_kstatus(
            &mut conds,
            Progress::Stalled,
            reasons::QUOTA_EXCEEDED,
            "no quota",
            Some(1),
            t(2),
        );
        assert_eq!(progress_of(&conds), Some(Progress::Stalled));
        assert!(!is_true(&conds, types::RECONCILING));
        assert_eq!(
            find_condition(&conds, types::STALLED)
                .unwrap()
                .last_transition_time,
            t(2)
        );
        // Ready stayed False throughout: its transition time is the first one.
        assert_eq!(
            find_condition(&conds, types::READY).unwrap().last_transition_time,
            t(1)
        );

        set_kstatus(
            &mut conds,
            Progress::Ready,
            reasons::SUCCEEDED,
            "done",
            Some(2),
            t(3),
        );
        assert_eq!(progress_of(&conds), Some(Progress::Ready));
        assert!(!set_kstatus(
            &mut conds,
            Progress::Ready,
            reasons::SUCCEEDED,
            "done",
            Some(2),
            t(4)
        ));

        set_kstatus(
            &mut conds,
            Progress::Idle,
            reasons::SUSPENDED,
            "suspended",
            Some(3),
            t(5),
        );
        assert_eq!(progress_of(&conds), Some(Progress::Idle));
        assert_eq!(progress_of(&[]), None);
    }

    /// Issue 35 item 6: `kubectl describe` showed each message three times.
    #[test]
    fn the_message_is_on_the_describing_condition_only() {
        for (progress, describes) in [
            (Progress::Reconciling, types::RECONCILING),
            (Progress::Stalled, types::STALLED),
            (Progress::Ready, types::READY),
            (Progress::Idle, types::READY),
        ] {
            let mut conds = vec![];
            set_kstatus(
                &mut conds,
                progress,
                reasons::QUEUED,
                "the message",
                Some(1),
                t(1),
            );
            let carrying: Vec<&str> = conds
                .iter()
                .filter(|c| c.message == "the message")
                .map(|c| c.type_.as_str())
                .collect();
            assert_eq!(carrying, vec![describes], "{progress:?}");
            assert!(conds.iter().all(|c| c.reason == reasons::QUEUED), "{progress:?}");
            assert_eq!(describing(&conds).map(|c| c.type_.as_str()), Some(describes));
        }
    }

    #[test]
    fn remove_condition_reports_presence() {
        let mut conds = vec![condition(
            types::SPEC_DRIFT,
            true,
            reasons::DRIFTED,
            "x",
            None,
            t(1),
        )];
        assert!(remove_condition(&mut conds, types::SPEC_DRIFT));
        assert!(!remove_condition(&mut conds, types::SPEC_DRIFT));
    }
}
