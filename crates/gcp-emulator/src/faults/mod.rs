//! Fault injection. Call faults (`FailCalls`, `Latency`, `RandomFailures`) act on incoming requests
//! before they reach a service; the others change what the simulated cloud does (stockouts,
//! preemptions, failing workloads, suppressed outputs).

use crate::errors::{ApiError, Code};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

// Each part in its own file; the parts share this module's imports and private items
// (`use super::*`), and what they make public is re-exported here so callers keep their paths.
mod lookup;
mod record;

pub use lookup::*;

/// One fault to inject. JSON form (admin API): `{"kind": "failCalls", "service": "tpu", ...}`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Fault {
    /// The next `count` calls of `service` (`tpu|dataproc|vertex|storage`) + `method` (e.g.
    /// `nodes.create`, `*` for any) fail with `code` (and `message`, default Google-like text).
    FailCalls {
        service: String,
        method: String,
        count: u32,
        code: Code,
        message: Option<String>,
    },
    /// No capacity for `accelerator` in `zone`: `nodes.create` fails with 429 RESOURCE_EXHAUSTED
    /// and queued resources stay in WAITING_FOR_RESOURCES until [`Fault::LiftStockout`].
    /// `accelerator` is an accelerator type (`v5p-8`) or a family (`v5p`, matches `v5p-*`).
    Stockout { zone: String, accelerator: String },
    /// Ends a stockout injected earlier (and a [`Fault::CapacityError`] for the same pair).
    LiftStockout { zone: String, accelerator: String },
    /// `nodes.create` for `accelerator` in `zone` runs out of capacity or quota, in one of the
    /// two shapes real capacity errors take: the call refused with 429 (`shape: call`), or the
    /// call accepted and its create operation ending with `error.code` 8 RESOURCE_EXHAUSTED
    /// when the node would have been READY (`shape: operation`; the node is gone then). Both
    /// carry `google.rpc` details: `cause: quota` an `ErrorInfo` `RESOURCE_QUOTA_EXCEEDED` and a
    /// `QuotaFailure` naming `quotaMetric`; `cause: stockout` an `ErrorInfo` `STOCKOUT`
    /// (see README "Capacity errors" for the sources). Lasts until `LiftStockout`.
    CapacityError {
        zone: String,
        accelerator: String,
        cause: CapacityCause,
        #[serde(default)]
        shape: ErrorShape,
        /// Quota metric for `cause: quota` (default `tpu.googleapis.com/<family>_pod_chips`).
        #[serde(default)]
        quota_metric: Option<String>,
    },
    /// Preempts a spot / preemptible node now (state PREEMPTED). Name: full resource name.
    PreemptNode { name: String },
    /// Announces a maintenance event on a TPU node (full name `.../nodes/n`) or, for any other
    /// name, a Compute Engine VM (`projects/p/zones/z/instances/i` or a unique bare name): its
    /// `upcomingMaintenance` (a VM's under `resourceStatus`; `type` SCHEDULED, or UNSCHEDULED
    /// with `unscheduled`; `canReschedule`; the window from `start_in_secs` emulated seconds
    /// from now, lasting `duration_secs`; status PENDING). At the window start the maintenance
    /// runs (`tpu::nodes::maintenance`, `compute::maintenance`). Unknown: NOT_FOUND.
    ScheduleMaintenance {
        name: String,
        start_in_secs: u64,
        duration_secs: u64,
        #[serde(default)]
        can_reschedule: bool,
        #[serde(default)]
        unscheduled: bool,
    },
    /// Preempts a Compute Engine Spot instance now (`name`: `projects/p/zones/z/instances/i`, or
    /// the bare instance name when unique): STOPPING, then TERMINATED
    /// (`scheduling.instanceTerminationAction` STOP, the default) or deleted (DELETE). A MIG
    /// recreates a deleted member when capacity allows. Non-Spot instances -> error.
    PreemptInstance { name: String },
    /// Limits Compute Engine capacity: at most `hosts` instances of `machineType` (e.g.
    /// `ct6e-standard-4t`) in `zone` at once (`None` = unlimited, the default). Instances in
    /// TERMINATED do not count. Waiting MIGs and resize requests re-check at once. The TPU
    /// `Stockout { zone, accelerator }` fault also stops Compute: `accelerator` may name a
    /// machine type or its TPU family (`v6e` covers `ct6e-*`, `v5p` `ct5p-*`, `tpu7x` `tpu7x-*`).
    /// A MIG resize request (`projects/p/zones/z/instanceGroupManagers/m/resizeRequests/r`)
    /// that is CREATING or ACCEPTED ends FAILED now with `status.error` (code
    /// `ZONE_RESOURCE_POOL_EXHAUSTED`, `message`); VMs it created are removed from the MIG.
    FailResizeRequest { name: String, message: Option<String> },
    ComputeCapacity {
        zone: String,
        machine_type: String,
        hosts: Option<u64>,
    },
    /// Preempts a queued resource's capacity now: SUSPENDING -> SUSPENDED (stateInitiator SERVICE).
    PreemptQueuedResource { name: String },
    /// The Dataproc batch (full name or batch id) ends FAILED: now if it exists and is not
    /// terminal, else when its run ends.
    FailBatch { name: String, message: Option<String> },
    /// The Spot VMs of a Vertex custom job (full name or numeric id; `scheduling.strategy` SPOT,
    /// PENDING or RUNNING) are reclaimed now: with `restartJobOnWorkerRestart` the job starts
    /// over (PENDING, then a full run), else it ends JOB_STATE_FAILED with a STOCKOUT error
    /// (code 8). See `vertex::jobs::preempt` for the sources.
    PreemptJob { name: String },
    /// No Vertex training capacity in `location` (e.g. `us-east5`): custom jobs stay
    /// JOB_STATE_PENDING (re-checked every `jobPending`); a FLEX_START job still waiting when its
    /// `scheduling.maxWaitDuration` (default 24 h, `0s` = forever) has passed since its creation
    /// ends JOB_STATE_EXPIRED. Ended by `LiftVertexStockout`.
    VertexStockout { location: String },
    /// Ends a [`Fault::VertexStockout`].
    LiftVertexStockout { location: String },
    /// The next `count` calls of `service` + `method` (`*` for any) are carried out, but their
    /// reply is lost: the client gets `code` (default UNAVAILABLE, HTTP 503) although the call
    /// took effect, as when a connection drops after the server acted. A call that fails on its
    /// own answers its own error (nothing was done, so nothing is lost). Issue 21 item 5: a lost
    /// `customJobs.create` reply leaves a job the caller never learned the name of.
    LoseReply {
        service: String,
        method: String,
        count: u32,
        code: Option<Code>,
    },
    /// `customJobs.list` lags behind creates: a custom job created while this is active is left
    /// out of the lists of its location for its first `lists` list calls and for `seconds` of
    /// emulated time after its creation (both hold when both are given). `customJobs.get` sees it
    /// at once. Ended (for jobs created afterwards) by `LiftVertexListLag`. See
    /// `vertex::jobs::list` for why lists may lag.
    VertexListLag {
        #[serde(default)]
        lists: u32,
        #[serde(default)]
        seconds: u64,
    },
    /// Ends a [`Fault::VertexListLag`]; jobs already hidden stay hidden for their lag.
    LiftVertexListLag,
    /// The Vertex custom job (full name or numeric id) ends JOB_STATE_FAILED, like `FailBatch`.
    FailJob { name: String, message: Option<String> },
    /// The TPU VM workload on this node (full name or node id) writes `_FAILED` instead of
    /// `_SUCCESS`, holding `exit_code` (default 1) as the operator's startup script does. Its
    /// container's last log line is `message` (default a simulated `RuntimeError`): what a
    /// tenant's training script may print, escapes and all.
    FailTpuWorkload {
        node: String,
        #[serde(default)]
        exit_code: Option<i32>,
        #[serde(default)]
        message: Option<String>,
    },
    /// This batch / job / node (full name or id) succeeds without writing any output.
    SuppressOutput { name: String },
    /// Delays calls of `service` (+ `method`, default any) by `millis` real milliseconds, for the
    /// next `count` calls (default: until cleared).
    Latency {
        service: String,
        method: Option<String>,
        millis: u64,
        count: Option<u32>,
    },
    /// Each call (of `service`, default any) fails with `code` with probability `rate`, drawn from
    /// a PRNG seeded with `seed` (deterministic for a given call sequence). One stream per
    /// `service`: injecting again for the same service replaces it, other services keep theirs,
    /// so every service can fail with its own code at once.
    RandomFailures {
        rate: f64,
        seed: u64,
        code: Code,
        service: Option<String>,
    },
}

/// What ran out, for [`Fault::CapacityError`].
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum CapacityCause {
    /// The zone has no capacity right now (clears by itself).
    Stockout,
    /// The project's quota is exhausted (needs a quota increase).
    Quota,
}

/// Where a capacity error shows, for [`Fault::CapacityError`].
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ErrorShape {
    /// The create call is refused: HTTP 429 RESOURCE_EXHAUSTED.
    #[default]
    Call,
    /// The create call is accepted; its long-running operation fails with code 8.
    Operation,
}

/// An active [`Fault::CapacityError`].
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CapacityErrorState {
    pub zone: String,
    pub accelerator: String,
    pub cause: CapacityCause,
    pub shape: ErrorShape,
    pub quota_metric: Option<String>,
}

impl CapacityErrorState {
    /// The error Google sends, with its `google.rpc` details.
    ///
    /// Quota: message as `gcloud compute tpus create` prints it for an exhausted TPU quota
    /// (`Quota limit '<limit>' has been exceeded. Limit: 0 in zone <zone>.`), `ErrorInfo` as
    /// googleapis `google/api/error_reason.proto` shows `RESOURCE_QUOTA_EXCEEDED` (domain
    /// `googleapis.com`, metadata `service`, `quota_metric`, `quota_limit`, `consumer`), and
    /// `QuotaFailure.violations[]` as `google/rpc/error_details.proto` defines it (`subject`,
    /// `description`, `apiService`, `quotaMetric`, `quotaId`). Stockout: the message of the plain
    /// stockout and `ErrorInfo.reason = STOCKOUT` (the out-of-stock example of
    /// `error_details.proto`). Which details the TPU API really attaches is not verified
    /// (docs/reliability.md, "Not verified against real GCP").
    pub fn error(&self, project: &str, accelerator_type: &str) -> ApiError {
        let family = accelerator_type.split('-').next().unwrap_or(accelerator_type);
        match self.cause {
            CapacityCause::Stockout => {
                let mut e = ApiError::new(
                    Code::ResourceExhausted,
                    format!(
                        "There is no more capacity in the zone \"{}\"; you can try in another zone where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions)",
                        self.zone
                    ),
                );
                e.details.push(serde_json::json!({
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "STOCKOUT",
                    "domain": "tpu.googleapis.com",
                    "metadata": {"zone": self.zone, "acceleratorType": accelerator_type},
                }));
                e
            }
            CapacityCause::Quota => {
                let limit = format!("TPU{}PodPerProjectPerZoneForTPUAPI", family.to_ascii_uppercase());
                let metric = self
                    .quota_metric
                    .clone()
                    .unwrap_or_else(|| format!("tpu.googleapis.com/{family}_pod_chips"));
                let message = format!(
                    "Quota limit '{limit}' has been exceeded. Limit: 0 in zone {}.",
                    self.zone
                );
                let mut e = ApiError::new(Code::ResourceExhausted, message.clone());
                e.details.push(serde_json::json!({
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "RESOURCE_QUOTA_EXCEEDED",
                    "domain": "googleapis.com",
                    "metadata": {
                        "consumer": format!("projects/{project}"),
                        "service": "tpu.googleapis.com",
                        "quota_metric": metric,
                        "quota_limit": limit,
                    },
                }));
                e.details.push(serde_json::json!({
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [{
                        "subject": format!("project:{project}"),
                        "description": message,
                        "apiService": "tpu.googleapis.com",
                        "quotaMetric": metric,
                        "quotaId": limit,
                    }],
                }));
                e
            }
        }
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailCallsState {
    pub service: String,
    pub method: String,
    pub remaining: u32,
    pub code: Code,
    pub message: Option<String>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LatencyState {
    pub service: String,
    pub method: Option<String>,
    pub millis: u64,
    pub remaining: Option<u32>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RandomState {
    pub rate: f64,
    pub state: u64,
    pub code: Code,
    pub service: Option<String>,
}

/// An active [`Fault::VertexListLag`].
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ListLag {
    pub lists: u32,
    pub seconds: u64,
}

/// Active faults (serializable for `GET /emulator/v1/faults`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Faults {
    pub fail_calls: Vec<FailCallsState>,
    /// [`Fault::LoseReply`]: calls carried out whose reply is replaced by an error.
    pub lost_replies: Vec<FailCallsState>,
    /// [`Fault::VertexListLag`] for custom jobs created from now on.
    pub vertex_list_lag: Option<ListLag>,
    pub stockouts: BTreeSet<(String, String)>,
    /// [`Fault::ComputeCapacity`]: `zone/machineType` -> hosts.
    pub compute_capacity: std::collections::BTreeMap<String, u64>,
    pub capacity_errors: Vec<CapacityErrorState>,
    /// Vertex locations without training capacity ([`Fault::VertexStockout`]).
    pub vertex_stockouts: BTreeSet<String>,
    /// Nodes whose create operation is to fail (shape `operation`), with the error.
    #[serde(skip)]
    pub doomed_creates: std::collections::BTreeMap<String, ApiError>,
    pub failing: BTreeSet<String>,
    /// Node or instance (full name or id) → the exit code its workload fails with.
    pub failing_workloads: BTreeMap<String, i32>,
    pub suppressed_outputs: BTreeSet<String>,
    pub latency: Vec<LatencyState>,
    /// At most one per `service` (None = any service); the first matching stream draws.
    pub random: Vec<RandomState>,
    /// Failure messages for `failing` entries (and failing workloads) that named one.
    #[serde(skip)]
    pub messages: std::collections::BTreeMap<String, String>,
}

/// What the services must do right after a fault was recorded.
#[derive(Debug, PartialEq)]
pub enum FollowUp {
    Nothing,
    /// Capacity came back: waiting queued resources, MIGs and resize requests re-check now.
    RecheckTpuAndCompute,
    /// Compute capacity changed: waiting MIGs and resize requests re-check now.
    RecheckCompute,
    /// The batch fails now if it is running or pending (else at the end of its run).
    FailBatch(String),
    /// The custom job fails now if it is running or pending (else at the end of its run).
    FailJob(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(service: Option<&str>, code: Code) -> RandomState {
        RandomState {
            rate: 1.0,
            state: 1,
            code,
            service: service.map(str::to_string),
        }
    }

    #[test]
    fn each_service_draws_from_its_own_random_stream() {
        let mut f = Faults {
            random: vec![
                stream(Some("tpu"), Code::ResourceExhausted),
                stream(Some("vertex"), Code::Unavailable),
            ],
            ..Faults::default()
        };
        let code = |f: &mut Faults, s| f.take_call_failure(s, "x").map(|(c, _)| c);
        assert_eq!(code(&mut f, "tpu"), Some(Code::ResourceExhausted));
        assert_eq!(code(&mut f, "vertex"), Some(Code::Unavailable));
        assert_eq!(code(&mut f, "dataproc"), None);
    }
}
