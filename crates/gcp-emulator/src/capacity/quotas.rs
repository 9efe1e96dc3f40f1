//! Per-project API rate quotas, per group of methods, counted in minute windows of emulated time
//! and refused with the error each API sends.
//!
//! Sources:
//! * Compute Engine, "Compute Engine rate quotas" (https://cloud.google.com/compute/api-quota):
//!   quotas apply per project to a group of methods, per 60 s interval; "if a project reaches a
//!   quota limit at 10:00:15, the quota refills at the start of the next synchronized interval,
//!   such as 10:01:00"; exceeding one gives "a 403 error with the reason rateLimitExceeded". The
//!   mutation group is "Queries", metric `compute.googleapis.com/default`, limit
//!   `defaultPerMinutePerProject`, 1,500 requests/minute.
//! * Serverless for Apache Spark quotas (https://cloud.google.com/dataproc-serverless/quotas):
//!   enforced per project and region, reset every sixty seconds, `RESOURCE_EXHAUSTED` (HTTP 429);
//!   `BatchOperationRequestsPerMinutePerProjectPerRegion` = 200 for CreateBatch and DeleteBatch.
//! * Vertex AI quotas (https://cloud.google.com/vertex-ai/docs/quotas): per project and region,
//!   "Job or long-running operation (LRO) submission requests" = 60 per minute.
//! * Cloud TPU: no public page lists the create rate. Marin's Iris autoscaler measured the
//!   project-wide `tpu.googleapis.com/qps/create` quota at 91/min and quotes the refusal as
//!   "Maximum number of CreateNode requests per minute" (marin-community/marin PR #6198).
//! * The ESF error shape (TPU, Dataproc, Vertex): 429 `RESOURCE_EXHAUSTED`, the message "Quota
//!   exceeded for quota metric '…' and limit '…' of service '…' for consumer 'project_number:…'."
//!   and `google.rpc.ErrorInfo` `{reason: RATE_LIMIT_EXCEEDED, domain: googleapis.com, metadata:
//!   {consumer, service, quota_metric, quota_limit}}` as googleapis `google/api/error_reason.proto`
//!   documents it (the `google-cloud-api` crate carries the text); real replies add
//!   `quota_limit_value`, `quota_location` and `quota_unit` to the metadata (seen in replies
//!   quoted in public issue threads, e.g. for `generativelanguage.googleapis.com`).
//!
//! Not verified: the window phase for TPU and Vertex (minute windows like Compute's are
//! assumed), the metric and limit names of the Dataproc, Vertex and TPU quotas other than those
//! cited, and whether a refused call counts against the window (it does not here).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;

use crate::errors::{ApiError, Code};

/// A group of methods that share one per-minute quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum QuotaGroup {
    /// TPU `nodes.create` and `queuedResources.create`, per project.
    TpuCreate,
    /// Compute Engine mutations (every method but gets and lists), per project.
    ComputeMutate,
    /// Dataproc `batches.create` and `batches.delete`, per project and region.
    DataprocBatch,
    /// Vertex AI `customJobs.create`, per project and region.
    VertexJobSubmit,
}

/// What one group is, as its API names it.
struct Facts {
    service: &'static str,
    api: &'static str,
    metric: &'static str,
    limit: &'static str,
    /// The names the message shows (ESF prints display names, not ids).
    metric_display: &'static str,
    limit_display: &'static str,
    default_per_minute: u64,
    regional: bool,
}

impl QuotaGroup {
    pub const ALL: [QuotaGroup; 4] = [
        Self::TpuCreate,
        Self::ComputeMutate,
        Self::DataprocBatch,
        Self::VertexJobSubmit,
    ];

    fn facts(self) -> Facts {
        match self {
            Self::TpuCreate => Facts {
                service: "tpu",
                api: "tpu.googleapis.com",
                metric: "tpu.googleapis.com/qps/create",
                limit: "CreateNodeRequestsPerMinutePerProject",
                metric_display: "CreateNode requests",
                limit_display: "Maximum number of CreateNode requests per minute",
                default_per_minute: 91,
                regional: false,
            },
            Self::ComputeMutate => Facts {
                service: "compute",
                api: "compute.googleapis.com",
                metric: "compute.googleapis.com/default",
                limit: "defaultPerMinutePerProject",
                metric_display: "Queries",
                limit_display: "Queries per minute",
                default_per_minute: 1500,
                regional: false,
            },
            Self::DataprocBatch => Facts {
                service: "dataproc",
                api: "dataproc.googleapis.com",
                metric: "dataproc.googleapis.com/batch_operation_requests",
                limit: "BatchOperationRequestsPerMinutePerProjectPerRegion",
                metric_display: "Batch operation requests",
                limit_display: "Batch operation requests per minute per project per region",
                default_per_minute: 200,
                regional: true,
            },
            Self::VertexJobSubmit => Facts {
                service: "vertex",
                api: "aiplatform.googleapis.com",
                metric: "aiplatform.googleapis.com/job_submission_requests",
                limit: "JobSubmissionRequestsPerMinutePerProjectPerRegion",
                metric_display: "Job submission requests",
                limit_display: "Job submission requests per minute per region",
                default_per_minute: 60,
                regional: true,
            },
        }
    }

    /// The documented (or, for TPU, measured) default limit per minute.
    pub fn default_per_minute(self) -> u64 {
        self.facts().default_per_minute
    }

    /// The group a call of `service` + `method` counts against, if any.
    pub fn of(service: &str, method: &str) -> Option<Self> {
        match (service, method) {
            ("tpu", "nodes.create" | "queuedResources.create") => Some(Self::TpuCreate),
            ("dataproc", "batches.create" | "batches.delete") => Some(Self::DataprocBatch),
            ("vertex", "customJobs.create") => Some(Self::VertexJobSubmit),
            ("compute", m) if !(m.ends_with(".get") || m.contains(".list")) => Some(Self::ComputeMutate),
            _ => None,
        }
    }
}

/// One configured quota (admin API `POST quotas`, [`crate::Emulator::set_rate_quota`]).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RateQuota {
    pub group: QuotaGroup,
    /// Calls per minute window (default: the group's documented default).
    #[serde(default)]
    pub per_minute: Option<u64>,
}

/// Where one call is counted: group, project, location (regional groups only), minute window.
type Key = (QuotaGroup, String, String, i64);

/// The configured quotas and their use.
#[derive(Debug, Default)]
pub struct RateQuotas {
    limits: BTreeMap<QuotaGroup, u64>,
    used: BTreeMap<Key, u64>,
    refused: BTreeMap<QuotaGroup, u64>,
}

/// What `GET quotas` shows.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QuotaView {
    pub group: QuotaGroup,
    pub per_minute: u64,
    /// Calls refused since the quota was set.
    pub refused: u64,
    /// Calls counted in the current minute window, by `project` or `project/location`.
    pub used_this_minute: BTreeMap<String, u64>,
}

impl RateQuotas {
    pub fn set(&mut self, quota: RateQuota) {
        let limit = quota
            .per_minute
            .unwrap_or_else(|| quota.group.default_per_minute());
        self.limits.insert(quota.group, limit);
        self.refused.entry(quota.group).or_default();
    }

    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Calls of `group` refused so far.
    pub fn refused(&self, group: QuotaGroup) -> u64 {
        self.refused.get(&group).copied().unwrap_or_default()
    }

    pub fn view(&self, now: DateTime<Utc>) -> Vec<QuotaView> {
        let window = window(now);
        self.limits
            .iter()
            .map(|(&group, &per_minute)| QuotaView {
                group,
                per_minute,
                refused: self.refused(group),
                used_this_minute: self
                    .used
                    .iter()
                    .filter(|((g, _, _, w), _)| *g == group && *w == window)
                    .map(|((_, p, l, _), n)| {
                        (
                            if l.is_empty() {
                                p.clone()
                            } else {
                                format!("{p}/{l}")
                            },
                            *n,
                        )
                    })
                    .collect(),
            })
            .collect()
    }

    /// Counts a call of `service` + `method` on the resource path `segs`
    /// (`projects/<p>/<locations|zones|regions>/<l>/...`), or refuses it when its group's window
    /// is full. `number` maps a project id to its number (the message names the number).
    pub fn admit(
        &mut self,
        service: &str,
        method: &str,
        segs: &[String],
        now: DateTime<Utc>,
        number: impl Fn(&str) -> u64,
    ) -> Result<(), ApiError> {
        let Some(group) = QuotaGroup::of(service, method) else {
            return Ok(());
        };
        let Some(&limit) = self.limits.get(&group) else {
            return Ok(());
        };
        let (project, location) = match segs {
            [p, project, _, location, ..] if p == "projects" => (project.clone(), location.clone()),
            [p, project, ..] if p == "projects" => (project.clone(), String::new()),
            _ => return Ok(()),
        };
        let facts = group.facts();
        let location = if facts.regional {
            region_of(&location)
        } else {
            String::new()
        };
        let window = window(now);
        self.used.retain(|(_, _, _, w), _| *w >= window);
        let used = self
            .used
            .entry((group, project.clone(), location.clone(), window))
            .or_default();
        if *used < limit {
            *used += 1;
            return Ok(());
        }
        *self.refused.entry(group).or_default() += 1;
        Err(refusal(&facts, limit, number(&project), &location))
    }
}

/// The minute window `now` falls in (windows start on whole minutes of emulated time).
fn window(now: DateTime<Utc>) -> i64 {
    now.timestamp().div_euclid(60)
}

/// `us-central1-a` -> `us-central1`; a region stays as it is.
fn region_of(location: &str) -> String {
    let parts: Vec<&str> = location.split('-').collect();
    match parts.as_slice() {
        [_, _, zone] if zone.len() == 1 => parts[..2].join("-"),
        _ => location.to_string(),
    }
}

/// The error the API answers a call over its quota with (see the module docs for the sources).
fn refusal(f: &Facts, limit: u64, project_number: u64, location: &str) -> ApiError {
    let message = format!(
        "Quota exceeded for quota metric '{}' and limit '{}' of service '{}' for consumer 'project_number:{project_number}'.",
        f.metric_display, f.limit_display, f.api
    );
    if f.service == "compute" {
        // Compute Engine's legacy shape: 403, `errors[].reason = rateLimitExceeded`.
        let mut e = ApiError::new(Code::PermissionDenied, message);
        e.compute_reason = Some("rateLimitExceeded");
        e.legacy_domain = Some("usageLimits");
        return e;
    }
    let mut e = ApiError::new(Code::ResourceExhausted, message);
    e.details.push(json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "RATE_LIMIT_EXCEEDED",
        "domain": "googleapis.com",
        "metadata": {
            "consumer": format!("projects/{project_number}"),
            "service": f.api,
            "quota_metric": f.metric,
            "quota_limit": f.limit,
            "quota_limit_value": limit.to_string(),
            "quota_location": if location.is_empty() { "global" } else { location },
            "quota_unit": if f.regional { "1/min/{project}/{region}" } else { "1/min/{project}" },
        },
    }));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(path: &str) -> Vec<String> {
        path.split('/').map(str::to_string).collect()
    }

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn a_full_window_refills_on_the_next_whole_minute() {
        let mut q = RateQuotas::default();
        q.set(RateQuota {
            group: QuotaGroup::TpuCreate,
            per_minute: Some(2),
        });
        let s = segs("projects/p/locations/us-east5-b/nodes");
        let call = |q: &mut RateQuotas, t| q.admit("tpu", "nodes.create", &s, at(t), |_| 7);
        assert!(call(&mut q, 15).is_ok() && call(&mut q, 16).is_ok());
        let err = call(&mut q, 59).unwrap_err();
        assert_eq!((err.code, err.http_status()), (Code::ResourceExhausted, 429));
        assert!(err.message.contains("project_number:7"), "{}", err.message);
        assert_eq!(err.details[0]["metadata"]["quota_limit_value"], "2");
        assert!(call(&mut q, 60).is_ok(), "refilled at the next whole minute");
        assert_eq!(q.refused(QuotaGroup::TpuCreate), 1);
        // Reads are not counted.
        assert!(q.admit("tpu", "nodes.get", &s, at(61), |_| 7).is_ok());
    }

    #[test]
    fn regional_groups_count_each_region_apart_and_compute_answers_403() {
        let mut q = RateQuotas::default();
        q.set(RateQuota {
            group: QuotaGroup::DataprocBatch,
            per_minute: Some(1),
        });
        q.set(RateQuota {
            group: QuotaGroup::ComputeMutate,
            per_minute: Some(0),
        });
        let a = segs("projects/p/locations/us-central1/batches");
        let b = segs("projects/p/locations/europe-west4/batches");
        assert!(q.admit("dataproc", "batches.create", &a, at(0), |_| 1).is_ok());
        assert!(q.admit("dataproc", "batches.create", &b, at(0), |_| 1).is_ok());
        assert!(q.admit("dataproc", "batches.delete", &a, at(1), |_| 1).is_err());
        let c = segs("projects/p/zones/us-east5-b/instances");
        let e = q
            .admit("compute", "instances.insert", &c, at(0), |_| 1)
            .unwrap_err();
        assert_eq!(e.http_status(), 403);
        assert_eq!(e.body()["error"]["errors"][0]["reason"], "rateLimitExceeded");
        assert!(q.admit("compute", "instances.get", &c, at(0), |_| 1).is_ok());
    }
}
