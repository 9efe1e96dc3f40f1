//! What a namespace holds right now: TPU chips and estimated burn rate of the slices that are
//! running or being created, the Vertex TPU jobs of running pipelines, and running Dataproc
//! batches. [`holdings`] and [`sum`] are pure; [`Listed::read`] reads the three kinds, and
//! [`super::book`] keeps what admissions read between listings.

use k8s_openapi::{api::core::v1::ObjectReference, apimachinery::pkg::apis::meta::v1::Condition};
use kube::{Api, Resource, ResourceExt};
use tpu_operator_api::{
    conditions::{find_condition, reasons, status, types},
    preprocess_batch::PreprocessBatch,
    tpu_slice::{TpuSlice, TpuSlicePhase, TpuSliceStatus},
    training_pipeline::{StageName, StageState, StageStatus, TrainingPipeline, TrainingPipelinePhase},
};

use super::request;
use crate::{
    governance::pricing::PriceTable,
    runtime::{
        error::{ReconcileError, Result},
        listing,
    },
};

/// Chips and spend the rest of a namespace holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    pub chips: u32,
    pub per_hour_usd: f64,
    /// `TpuSlice a (8 chips, $21.60/h)`, ... for messages.
    pub holders: Vec<String>,
}

impl Usage {
    pub fn describe(&self) -> String {
        if self.holders.is_empty() {
            "nothing running".to_string()
        } else {
            self.holders.join(", ")
        }
    }

    fn add(&mut self, what: String, chips: u32, per_hour_usd: f64) {
        self.chips += chips;
        self.per_hour_usd += per_hour_usd;
        self.holders
            .push(format!("{what} ({chips} chips, ${per_hour_usd:.2}/h)"));
    }
}

/// Whether a slice holds (or is being given) TPU capacity: anything between the create call and
/// the node being gone. A slice refused by policy, never reconciled, or failed with nothing left
/// in the cloud holds none.
pub fn holds_capacity(st: &TpuSliceStatus) -> bool {
    use TpuSlicePhase as P;
    match st.phase {
        P::Queued | P::Provisioning | P::Ready | P::Degraded | P::Preempted | P::Recreating | P::Deleting => {
            true
        }
        P::Pending | P::Waiting | P::Suspended | P::Failed => {
            st.node_state.is_some() || st.queued_resource_state.is_some()
        }
    }
}

/// What one object holds now: chips and estimated spend.
#[derive(Clone, Debug, PartialEq)]
pub struct Holding {
    /// The holder's UID: the one thing about it a tenant cannot write.
    pub uid: String,
    /// `TpuSlice a`, for messages.
    pub what: String,
    pub chips: u32,
    pub per_hour_usd: f64,
}

/// What each listed object holds (objects holding nothing are left out).
pub fn holdings(
    slices: &[TpuSlice],
    pipelines: &[TrainingPipeline],
    batches: &[PreprocessBatch],
    prices: &PriceTable,
) -> Vec<Holding> {
    let slices = slices.iter().filter_map(|s| slice_holding(s, prices));
    let jobs = pipelines.iter().filter_map(|tp| vertex_job_holding(tp, prices));
    let batches = batches.iter().filter_map(batch_holding);
    slices.chain(jobs).chain(batches).collect()
}

fn holding(uid: Option<String>, what: String, chips: u32, per_hour_usd: f64) -> Holding {
    Holding {
        uid: uid.unwrap_or_default(),
        what,
        chips,
        per_hour_usd,
    }
}

/// A slice holds its spec's chips, at its price, while its status says it holds capacity.
fn slice_holding(s: &TpuSlice, prices: &PriceTable) -> Option<Holding> {
    if !s.status.as_ref().is_some_and(holds_capacity) {
        return None;
    }
    let shape = s.spec.total_shape()?;
    let (per_hour, _) = prices.slice_per_hour(&shape, s.spec.price_kind());
    Some(holding(
        s.uid(),
        format!("TpuSlice {}", s.name_any()),
        shape.chips,
        per_hour,
    ))
}

/// A pipeline's Vertex job holds its replicas' chips while it may bill (see [`job_bills`]).
fn vertex_job_holding(tp: &TrainingPipeline, prices: &PriceTable) -> Option<Holding> {
    let (Some(v), Some(st)) = (&tp.spec.training.vertex, &tp.status) else {
        return None;
    };
    let train = st.stages.iter().find(|s| s.name == StageName::Train)?;
    let cancelling = job_bills(st.phase, train)?;
    let replicas = u32::try_from(v.replica_count.max(1)).unwrap_or(1);
    let chips = v.tpu_shape().map_or(0, |s| s.chips * replicas);
    let (per_hour, _) = request::vertex_per_hour(v, prices);
    let what = if cancelling {
        format!("Vertex job of TrainingPipeline {}, cancelling", tp.name_any())
    } else {
        format!("Vertex job of TrainingPipeline {}", tp.name_any())
    };
    Some(holding(tp.uid(), what, chips, per_hour))
}

/// Whether the training stage's Vertex job may bill now (`Some(cancelling)`), from status alone:
/// queued or running; or cancelled by suspend or a Kueue eviction (state `Cancelled` with a job
/// name) and not yet seen ended (no `endTime`: the planner sets it once the job has ended); or the
/// pipeline being deleted with a job its finalizer waits for (deletion cancels every job and
/// waits until each has ended). A job cancelling bills until Vertex says it has ended.
fn job_bills(phase: TrainingPipelinePhase, train: &StageStatus) -> Option<bool> {
    let has_job = train.gcp_name.is_some();
    match (phase, train.state) {
        (TrainingPipelinePhase::Succeeded | TrainingPipelinePhase::Failed, _) => None,
        (TrainingPipelinePhase::Deleting, StageState::Cancelled) if has_job => Some(true),
        (_, StageState::Running | StageState::Queued) => Some(false),
        (_, StageState::Cancelled) if has_job && train.end_time.is_none() => Some(true),
        _ => None,
    }
}

/// A batch holds no chips, only its estimated spend while it has one.
fn batch_holding(b: &PreprocessBatch) -> Option<Holding> {
    let per_hour = b
        .status
        .as_ref()
        .and_then(|s| s.estimated_cost.as_ref())
        .map_or(0.0, |c| c.per_hour_usd);
    (per_hour > 0.0).then(|| holding(b.uid(), format!("PreprocessBatch {}", b.name_any()), 0, per_hour))
}

/// Sums `holdings` but the one of the object being admitted (`exclude`, its UID). Only the
/// object's own UID is left out: ownerReferences, labels and names are the tenant's to write, so
/// nothing else it could point at one object may take another out of the count (a pipeline's
/// children count like any other object while they hold something).
pub fn sum<'a>(holdings: impl IntoIterator<Item = &'a Holding>, exclude: &str) -> Usage {
    let mut usage = Usage::default();
    for h in holdings.into_iter().filter(|h| h.uid != exclude) {
        usage.add(h.what.clone(), h.chips, h.per_hour_usd);
    }
    usage
}

/// What a namespace's objects hold, and how many of them a policy refuses: read a page at a time
/// ([`listing::for_each`]) and kept as that alone, so that a namespace of large objects costs one
/// page of them.
#[derive(Debug, Default)]
pub struct Listed {
    pub holdings: Vec<Holding>,
    /// The objects holding something, for the Events of a budget action.
    pub holders: Vec<ObjectReference>,
    /// Objects `Stalled` with reason `PolicyDenied`.
    pub refused: u32,
}

impl Listed {
    /// Reads the three kinds in `namespace`.
    pub async fn read(client: &kube::Client, namespace: &str, prices: &PriceTable) -> Result<Self> {
        let mut listed = Self::default();
        let slices = Api::<TpuSlice>::namespaced(client.clone(), namespace);
        listing::for_each(&slices, |s| {
            listed.hold(&s, slice_holding(&s, prices));
            listed.count_refused(s.status.as_ref().map(|st| st.conditions.as_slice()));
        })
        .await
        .map_err(ReconcileError::kube("list TpuSlices for the namespace's usage"))?;
        let pipelines = Api::<TrainingPipeline>::namespaced(client.clone(), namespace);
        listing::for_each(&pipelines, |tp| {
            listed.hold(&tp, vertex_job_holding(&tp, prices));
            listed.count_refused(tp.status.as_ref().map(|st| st.conditions.as_slice()));
        })
        .await
        .map_err(ReconcileError::kube(
            "list TrainingPipelines for the namespace's usage",
        ))?;
        let batches = Api::<PreprocessBatch>::namespaced(client.clone(), namespace);
        listing::for_each(&batches, |b| {
            listed.hold(&b, batch_holding(&b));
            listed.count_refused(b.status.as_ref().map(|st| st.conditions.as_slice()));
        })
        .await
        .map_err(ReconcileError::kube(
            "list PreprocessBatches for the namespace's usage",
        ))?;
        Ok(listed)
    }

    fn hold<K: Resource<DynamicType = ()>>(&mut self, obj: &K, holding: Option<Holding>) {
        if let Some(h) = holding {
            self.holdings.push(h);
            self.holders.push(obj.object_ref(&()));
        }
    }

    fn count_refused(&mut self, conditions: Option<&[Condition]>) {
        let refused = conditions
            .and_then(|c| find_condition(c, types::STALLED))
            .is_some_and(|c| c.status == status::TRUE && c.reason == reasons::POLICY_DENIED);
        self.refused += u32::from(refused);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What the listed objects hold, but `exclude`'s (the UID of the object being admitted).
    fn tally(
        slices: &[TpuSlice],
        pipelines: &[TrainingPipeline],
        batches: &[PreprocessBatch],
        exclude: &str,
        prices: &PriceTable,
    ) -> Usage {
        sum(&holdings(slices, pipelines, batches, prices), exclude)
    }

    fn slice(name: &str, uid: &str, phase: &str, accel: &str, capacity: serde_json::Value) -> TpuSlice {
        serde_json::from_value(json!({
            "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuSlice",
            "metadata": {"name": name, "uid": uid},
            "spec": {"zone": "us-east5-b", "acceleratorType": accel, "runtimeVersion": "v", "capacity": capacity},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn counts_slices_holding_capacity_and_skips_the_excluded() {
        let slices = vec![
            slice("a", "u-a", "Ready", "v6e-8", json!({"spot": {}})),
            slice("b", "u-b", "Provisioning", "v6e-4", json!({"onDemand": {}})),
            slice("denied", "u-c", "Failed", "v6e-8", json!({})),
            slice("new", "u-d", "Pending", "v6e-8", json!({})),
            slice("me", "u-me", "Ready", "v6e-8", json!({})),
        ];
        let u = tally(&slices, &[], &[], "u-me", &PriceTable::default());
        assert_eq!(u.chips, 12);
        assert!((u.per_hour_usd - (10.8 + 10.8)).abs() < 1e-9, "{u:?}");
        assert_eq!(u.holders.len(), 2, "{u:?}");
        assert!(
            u.describe().contains("TpuSlice a (8 chips, $10.80/h)"),
            "{}",
            u.describe()
        );
    }

    /// ownerReferences are the tenant's to write: one naming the object being admitted does not
    /// take a running slice out of the count (a quota bypass otherwise).
    #[test]
    fn an_owner_reference_to_the_admitted_object_does_not_exclude_a_holder() {
        let mut running = slice("running", "u-run", "Ready", "v6e-8", json!({}));
        running.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "tpu-operator.dev/v1beta1".into(),
                kind: "TpuSlice".into(),
                name: "refused".into(),
                uid: "u-refused".into(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        let u = tally(&[running], &[], &[], "u-refused", &PriceTable::default());
        assert_eq!(u.chips, 8, "{u:?}");
    }

    #[test]
    fn running_vertex_pipelines_count_their_chips() {
        let tp: TrainingPipeline = serde_json::from_value(json!({
            "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TrainingPipeline",
            "metadata": {"name": "p", "uid": "u-p"},
            "spec": {"region": "us-east5", "artifacts": {"modelDir": "gs://b/m/"},
                     "training": {"vertex": {"machineType": "ct6e-standard-4t", "tpuTopology": "2x4",
                                             "container": {"image": "i"}}}},
            "status": {"phase": "Training", "stages": [{"name": "Train", "kind": "VertexCustomJob", "state": "Running"}]}
        }))
        .unwrap();
        let u = tally(&[], std::slice::from_ref(&tp), &[], "", &PriceTable::default());
        assert_eq!(u.chips, 8, "{u:?}");
        assert!((u.per_hour_usd - 21.6).abs() < 1e-9, "{u:?}");
        assert_eq!(tally(&[], &[tp], &[], "u-p", &PriceTable::default()).chips, 0);
    }

    /// Issue 47: a job suspend or an eviction cancelled counts until its end is recorded, and
    /// every job a deleting pipeline waits for counts.
    #[test]
    fn a_cancelling_vertex_job_counts_until_it_has_ended() {
        let pipeline = |phase: &str, state: &str, end: Option<&str>| -> TrainingPipeline {
            let mut stage = json!({"name": "Train", "kind": "VertexCustomJob", "state": state,
                                   "gcpName": "projects/p/locations/us-east5/customJobs/1"});
            if let Some(end) = end {
                stage["endTime"] = json!(end);
            }
            serde_json::from_value(json!({
                "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TrainingPipeline",
                "metadata": {"name": "p", "uid": "u-p"},
                "spec": {"region": "us-east5", "artifacts": {"modelDir": "gs://b/m/"},
                         "training": {"vertex": {"machineType": "ct6e-standard-4t", "tpuTopology": "2x4",
                                                 "container": {"image": "i"}}}},
                "status": {"phase": phase, "stages": [stage]}
            }))
            .unwrap()
        };
        let chips = |tp: TrainingPipeline| tally(&[], &[tp], &[], "", &PriceTable::default());
        let cancelling = chips(pipeline("Suspended", "Cancelled", None));
        assert_eq!(cancelling.chips, 8, "{cancelling:?}");
        assert!(cancelling.describe().contains("cancelling"), "{cancelling:?}");
        assert_eq!(chips(pipeline("Waiting", "Cancelled", None)).chips, 8, "evicted");
        let ended = Some("2026-03-02T09:00:00Z");
        assert_eq!(chips(pipeline("Suspended", "Cancelled", ended)).chips, 0);
        assert_eq!(chips(pipeline("Deleting", "Cancelled", ended)).chips, 8);
        assert_eq!(chips(pipeline("Deleting", "Running", ended)).chips, 8);
        assert_eq!(chips(pipeline("Failed", "Failed", ended)).chips, 0);
    }
}
