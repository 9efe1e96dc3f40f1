//! Fault injection. Call faults (`FailCalls`, `Latency`, `RandomFailures`) act on incoming requests
//! before they reach a service; the others change what the simulated cloud does (stockouts,
//! preemptions, failing workloads, suppressed outputs).

use crate::errors::{ApiError, Code};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

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
    /// `_SUCCESS`, holding `exit_code` (default 1) as the operator's startup script does.
    FailTpuWorkload {
        node: String,
        #[serde(default)]
        exit_code: Option<i32>,
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
    /// Failure messages for `failing` entries that named one.
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

impl Faults {
    /// Records a fault that changes what the cloud does from now on (every [`Fault`] except the
    /// preemptions and `FailResizeRequest`, which act on one resource at once).
    pub fn record(&mut self, f: Fault) -> Result<FollowUp, ApiError> {
        let follow_up = match f {
            Fault::FailCalls { .. }
            | Fault::LoseReply { .. }
            | Fault::Latency { .. }
            | Fault::RandomFailures { .. } => {
                self.record_call_fault(f)?;
                FollowUp::Nothing
            }
            Fault::VertexListLag { lists, seconds } => {
                self.vertex_list_lag = Some(ListLag { lists, seconds });
                FollowUp::Nothing
            }
            Fault::LiftVertexListLag => {
                self.vertex_list_lag = None;
                FollowUp::Nothing
            }
            Fault::Stockout { zone, accelerator } => {
                self.stockouts.insert((zone, accelerator));
                FollowUp::Nothing
            }
            Fault::CapacityError {
                zone,
                accelerator,
                cause,
                shape,
                quota_metric,
            } => {
                self.capacity_errors
                    .retain(|c| (&c.zone, &c.accelerator) != (&zone, &accelerator));
                self.capacity_errors.push(CapacityErrorState {
                    zone,
                    accelerator,
                    cause,
                    shape,
                    quota_metric,
                });
                FollowUp::Nothing
            }
            Fault::LiftStockout { zone, accelerator } => {
                self.capacity_errors
                    .retain(|c| (&c.zone, &c.accelerator) != (&zone, &accelerator));
                self.stockouts.remove(&(zone, accelerator));
                FollowUp::RecheckTpuAndCompute
            }
            Fault::ComputeCapacity {
                zone,
                machine_type,
                hosts,
            } => {
                let key = format!("{zone}/{machine_type}");
                match hosts {
                    Some(h) => self.compute_capacity.insert(key, h),
                    None => self.compute_capacity.remove(&key),
                };
                FollowUp::RecheckCompute
            }
            Fault::VertexStockout { location } => {
                self.vertex_stockouts.insert(location);
                FollowUp::Nothing
            }
            Fault::LiftVertexStockout { location } => {
                self.vertex_stockouts.remove(&location);
                FollowUp::Nothing
            }
            Fault::FailBatch { name, message } => FollowUp::FailBatch(self.doom(name, message)),
            Fault::FailJob { name, message } => FollowUp::FailJob(self.doom(name, message)),
            Fault::FailTpuWorkload { node, exit_code } => {
                self.failing_workloads.insert(node, exit_code.unwrap_or(1));
                FollowUp::Nothing
            }
            Fault::SuppressOutput { name } => {
                self.suppressed_outputs.insert(name);
                FollowUp::Nothing
            }
            Fault::PreemptNode { .. }
            | Fault::PreemptQueuedResource { .. }
            | Fault::PreemptInstance { .. }
            | Fault::FailResizeRequest { .. }
            | Fault::PreemptJob { .. } => {
                return Err(ApiError::invalid(
                    "this fault acts on one resource; the service owning it applies it",
                ));
            }
        };
        Ok(follow_up)
    }

    /// Records a fault that acts on incoming calls (`FailCalls`, `LoseReply`, `Latency`,
    /// `RandomFailures`); [`Faults::record`] sends only those here.
    fn record_call_fault(&mut self, f: Fault) -> Result<(), ApiError> {
        match f {
            Fault::FailCalls {
                service,
                method,
                count,
                code,
                message,
            } => {
                self.fail_calls.push(FailCallsState {
                    service,
                    method,
                    remaining: count,
                    code,
                    message,
                });
            }
            Fault::LoseReply {
                service,
                method,
                count,
                code,
            } => {
                self.lost_replies.push(FailCallsState {
                    service,
                    method,
                    remaining: count,
                    code: code.unwrap_or(Code::Unavailable),
                    message: None,
                });
            }
            Fault::Latency {
                service,
                method,
                millis,
                count,
            } => {
                self.latency.push(LatencyState {
                    service,
                    method,
                    millis,
                    remaining: count,
                });
            }
            Fault::RandomFailures {
                rate,
                seed,
                code,
                service,
            } => {
                self.add_random(RandomState {
                    rate,
                    state: seed,
                    code,
                    service,
                })?;
            }
            _ => unreachable!("record sends only call faults here"),
        }
        Ok(())
    }

    /// Marks a batch / job (full name or id) to fail, with its message if one was given.
    fn doom(&mut self, name: String, message: Option<String>) -> String {
        if let Some(m) = message {
            self.messages.insert(name.clone(), m);
        }
        self.failing.insert(name.clone());
        name
    }

    fn add_random(&mut self, stream: RandomState) -> Result<(), ApiError> {
        let rate = stream.rate;
        if !(0.0..=1.0).contains(&rate) {
            return Err(ApiError::invalid_field(
                "rate",
                format!("rate {rate} must be within [0, 1]"),
            ));
        }
        self.random.retain(|r| r.service != stream.service);
        // A service-specific stream must win over an any-service one, so those go first.
        if stream.service.is_some() {
            self.random.insert(0, stream);
        } else {
            self.random.push(stream);
        }
        Ok(())
    }
}

/// `pattern` is an accelerator type (`v5p-8`) or a family (`v5p`, matches `v5p-*`).
pub fn accel_matches(pattern: &str, accelerator_type: &str) -> bool {
    pattern == accelerator_type
        || accelerator_type
            .strip_prefix(pattern)
            .is_some_and(|rest| rest.starts_with('-'))
}

fn matches(pattern: &str, value: &str) -> bool {
    pattern == "*" || pattern == value
}

/// `name` given as a full resource name or its last segment.
/// The value `map` holds for `full` or its last segment.
pub fn matching<'a, V>(map: &'a BTreeMap<String, V>, full: &str) -> Option<&'a V> {
    map.get(full).or_else(|| map.get(id_of(full)))
}

pub fn name_matches(set: &BTreeSet<String>, full: &str) -> bool {
    set.contains(full) || set.contains(id_of(full))
}

/// The last segment of a full resource name (a fault may name a resource either way).
fn id_of(full: &str) -> &str {
    full.rsplit('/').next().unwrap_or(full)
}

/// Consumes one use of the first counted fault matching `service` + `method` (dropping it when
/// used up): the code and message to answer with.
fn take_counted(list: &mut Vec<FailCallsState>, service: &str, method: &str) -> Option<(Code, String)> {
    let f = list
        .iter_mut()
        .find(|f| f.remaining > 0 && matches(&f.service, service) && matches(&f.method, method))?;
    f.remaining -= 1;
    let out = (
        f.code,
        f.message
            .clone()
            .unwrap_or_else(|| f.code.default_message().to_string()),
    );
    list.retain(|f| f.remaining > 0);
    Some(out)
}

impl Faults {
    /// Consumes a matching `FailCalls` or draws a random failure. Returns the code and message.
    pub fn take_call_failure(&mut self, service: &str, method: &str) -> Option<(Code, String)> {
        if let Some(out) = take_counted(&mut self.fail_calls, service, method) {
            return Some(out);
        }
        if let Some(r) = self
            .random
            .iter_mut()
            .find(|r| r.service.as_deref().is_none_or(|s| s == service))
        {
            // splitmix64: tiny, seedable, and stable across dependency versions.
            r.state = r.state.wrapping_add(0x9E3779B97F4A7C15);
            let mut z = r.state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
            z ^= z >> 31;
            let draw = (z >> 11) as f64 / (1u64 << 53) as f64;
            if draw < r.rate {
                return Some((r.code, r.code.default_message().to_string()));
            }
        }
        None
    }

    /// Consumes a matching [`Fault::LoseReply`]: the error to answer once the call was carried out.
    pub fn take_lost_reply(&mut self, service: &str, method: &str) -> Option<(Code, String)> {
        take_counted(&mut self.lost_replies, service, method)
    }

    /// Real milliseconds to wait before answering this call.
    pub fn take_latency(&mut self, service: &str, method: &str) -> u64 {
        let mut total = 0;
        for l in &mut self.latency {
            if matches(&l.service, service)
                && l.method.as_deref().is_none_or(|m| matches(m, method))
                && l.remaining != Some(0)
            {
                total += l.millis;
                if let Some(r) = &mut l.remaining {
                    *r -= 1;
                }
            }
        }
        self.latency.retain(|l| l.remaining != Some(0));
        total
    }

    /// True when `zone` has no capacity for `accelerator_type` (e.g. `v5p-8`).
    pub fn stocked_out(&self, zone: &str, accelerator_type: &str) -> bool {
        self.stockouts
            .iter()
            .any(|(z, a)| z == zone && accel_matches(a, accelerator_type))
    }

    /// The active [`Fault::CapacityError`] for a create of `accelerator_type` in `zone`.
    pub fn capacity_error(&self, zone: &str, accelerator_type: &str) -> Option<&CapacityErrorState> {
        self.capacity_errors
            .iter()
            .find(|c| c.zone == zone && accel_matches(&c.accelerator, accelerator_type))
    }
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
