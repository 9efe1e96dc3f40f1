//! Objects of the three kinds, small enough to converge in a few hundred milliseconds on the
//! emulators' manual clock. Every pipeline and batch gets artifact paths of its own, so many of
//! them can live in one emulator without sharing outputs.

use serde_json::{Value, json};
use tpu_operator_api::{PreprocessBatch, TpuSlice, TrainingPipeline};

pub const PROJECT: &str = "demo-project";
pub const BUCKET: &str = "demo-project-tpu-data";
pub const ZONE: &str = "us-east5-b";
/// Where a planned slice's first rungs ask and find nothing (its reservation is full, Spot is
/// stocked out): its last rung asks in [`ZONE`], which has capacity.
pub const PLAN_ZONE: &str = "us-east5-a";
/// The reservation a planned TPU API slice asks first (`Capacity::prepare` makes it full).
pub const PLAN_RESERVATION: &str = "team-res";
/// The object every batch and pipeline reads; `World::seed_inputs` uploads it.
pub const RAW_OBJECT: &str = "raw/part-00000";

/// The VM image of Compute Engine slices.
pub const COMPUTE_IMAGE: &str = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts";

/// How a TpuSlice gets its capacity (and through which API).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capacity {
    /// TPU API: `nodes.create` with `spot: {}`.
    SpotNode,
    /// TPU API: `nodes.create` on demand (no scheduling config): never preempted, so a READY one
    /// is not kept under its zone's listing.
    OnDemandNode,
    /// TPU API: `queuedResources.create` (spot tier).
    Queued,
    /// Compute Engine: one spot instance (`v6e-8`, single host).
    ComputeSpot,
    /// Compute Engine: one on-demand instance (`tpu7x-8`, single host).
    ComputeOnDemand,
    /// Compute Engine: a workload policy, a regional template and a MIG of 4 spot hosts
    /// (`v6e-16`).
    ComputeMultiHost,
    /// Compute Engine: a template, an empty MIG and a flex-start resize request (`v6e-8`).
    ComputeFlexStart,
    /// TPU API, `spec.capacityPlan`: its reservation (full) in [`PLAN_ZONE`] for 1 min, Spot
    /// there (stocked out) for 1 min, then on demand in [`ZONE`], where it lands: three rungs,
    /// a queued resource and then two node ids.
    PlanTpuApi,
    /// TPU API, `spec.multislice` of this many slices (2 or more): one Spot-tier queued resource
    /// per slice, each with one node (`<id>-s<k>`, `<id>-s<k>r<n>` once replaced).
    SpotMultislice(u32),
    /// Compute Engine, `spec.capacityPlan`: one Spot instance in [`PLAN_ZONE`] (stocked out:
    /// the insert is taken and the instance fails to provision), moving on at that first
    /// refusal, then one on-demand instance in [`ZONE`] (`v6e-8`).
    PlanComputeEngine,
}

/// The API a run's slices are provisioned through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    TpuApi,
    ComputeEngine,
}

impl Capacity {
    /// What `crash-bench --maintenance` draws: TPU API nodes, whose metadata the operator
    /// patches to ask for a checkpoint before a maintenance.
    pub const MAINTAINED: [Capacity; 3] = [Capacity::SpotNode, Capacity::OnDemandNode, Capacity::Queued];
    pub const TPU_API: [Capacity; 3] = [Capacity::SpotNode, Capacity::Queued, Capacity::PlanTpuApi];
    pub const COMPUTE_ENGINE: [Capacity; 5] = [
        Capacity::ComputeSpot,
        Capacity::ComputeOnDemand,
        Capacity::ComputeMultiHost,
        Capacity::ComputeFlexStart,
        Capacity::PlanComputeEngine,
    ];
    /// The planned slices (`crash-bench --capacity plan` runs only these).
    pub const PLANS: [Capacity; 2] = [Capacity::PlanTpuApi, Capacity::PlanComputeEngine];

    pub fn backend(self) -> Backend {
        match self {
            Capacity::SpotNode
            | Capacity::OnDemandNode
            | Capacity::Queued
            | Capacity::PlanTpuApi
            | Capacity::SpotMultislice(_) => Backend::TpuApi,
            _ => Backend::ComputeEngine,
        }
    }

    pub fn is_plan(self) -> bool {
        Capacity::PLANS.contains(&self)
    }

    /// Where a planned slice must land (rung index, zone): the first rungs have no capacity by
    /// [`Capacity::prepare`], so landing anywhere else means the run did not test the plan.
    pub fn landing(self) -> Option<(i32, &'static str)> {
        match self {
            Capacity::PlanTpuApi => Some((2, ZONE)),
            Capacity::PlanComputeEngine => Some((1, ZONE)),
            _ => None,
        }
    }

    /// Makes the cloud refuse a planned slice's first rungs: a full reservation and Spot
    /// stocked out in [`PLAN_ZONE`] (other slices of a run ask in [`ZONE`] and are not touched).
    pub fn prepare(self, gcp: &gcp_emulator::Emulator) {
        if self == Capacity::PlanTpuApi {
            let reservation =
                format!("projects/{PROJECT}/locations/{PLAN_ZONE}/reservations/{PLAN_RESERVATION}");
            gcp.create_reservation(&reservation, 0)
                .expect("a full reservation");
        }
        if self.is_plan() {
            gcp.set_stock(gcp_emulator::StockSpec {
                zone: PLAN_ZONE.into(),
                accelerator: "v6e".into(),
                kind: gcp_emulator::CapacityKind::Spot,
                chips: 0,
                steps: Vec::new(),
                refill: None,
            });
        }
    }

    /// What the slice owns in the cloud at most (no preemption): one incarnation, or for a plan
    /// one per rung tried (a create refused at once makes nothing and is not counted).
    pub fn owns(self) -> Owned {
        let mut o = Owned::default();
        match self {
            Capacity::SpotNode | Capacity::OnDemandNode => o.nodes = 1,
            Capacity::Queued => o.queued = 1,
            Capacity::SpotMultislice(n) => o.queued = n as usize,
            // The reservation's queued resource, the Spot node and the on-demand node.
            Capacity::PlanTpuApi => {
                o.queued = 1;
                o.nodes = 2;
            }
            // The Spot instance (inserted, then failing to provision) and the on-demand one.
            Capacity::PlanComputeEngine => o.instances = 2,
            Capacity::ComputeSpot | Capacity::ComputeOnDemand => o.instances = 1,
            Capacity::ComputeMultiHost => o.groups = 1,
            Capacity::ComputeFlexStart => {
                o.groups = 1;
                o.resize_requests = 1;
            }
        }
        o
    }

    /// `spec.acceleratorType`, `spec.capacity` and the provisioner fields of a slice spec.
    fn spec(self) -> Value {
        let tpu_api = |capacity: Value| {
            json!({
                "acceleratorType": "v6e-8",
                "runtimeVersion": "v2-alpha-tpuv6e",
                "capacity": capacity
            })
        };
        let compute = |accelerator: &str, capacity: Value| {
            json!({
                "acceleratorType": accelerator,
                "provisioner": "ComputeEngine",
                "computeEngine": {"image": COMPUTE_IMAGE},
                "capacity": capacity
            })
        };
        match self {
            Capacity::SpotNode => tpu_api(json!({"spot": {}})),
            Capacity::OnDemandNode => tpu_api(json!({"onDemand": {}})),
            Capacity::Queued => tpu_api(json!({"queued": {"tier": "Spot", "validUntilDuration": "6h"}})),
            Capacity::SpotMultislice(n) => {
                let mut spec = Capacity::Queued.spec();
                spec["multislice"] = json!({"nodeCount": n});
                spec
            }
            Capacity::ComputeSpot => compute("v6e-8", json!({"spot": {}})),
            Capacity::ComputeOnDemand => compute("tpu7x-8", json!({"onDemand": {}})),
            Capacity::ComputeMultiHost => compute("v6e-16", json!({"spot": {}})),
            // Longer than any run, so the run duration never ends inside one.
            Capacity::ComputeFlexStart => compute("v6e-8", json!({"flexStart": {"runDuration": "7d"}})),
            Capacity::PlanTpuApi => planned(
                tpu_api(Value::Null),
                json!([
                    {"reserved": {"reservationName": PLAN_RESERVATION}, "waitFor": "1m"},
                    {"spot": {}, "waitFor": "1m"},
                    {"onDemand": {}, "zones": [ZONE]},
                ]),
            ),
            // Spot without waitFor: moves on at its first refusal.
            Capacity::PlanComputeEngine => planned(
                compute("v6e-8", Value::Null),
                json!([{"spot": {}}, {"onDemand": {}, "zones": [ZONE]}]),
            ),
        }
    }
}

/// `base` (a spec part without capacity) asking `rungs` in order, from [`PLAN_ZONE`].
fn planned(mut base: Value, rungs: Value) -> Value {
    if let Some(o) = base.as_object_mut() {
        o.remove("capacity");
        o.insert("zone".into(), json!(PLAN_ZONE));
        o.insert("capacityPlan".into(), json!({"rungs": rungs}));
    }
    base
}

/// Cloud resources an object may own (see [`Capacity::owns`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Owned {
    pub nodes: usize,
    pub queued: usize,
    /// Compute Engine instances made directly (single-host slices; not MIG members).
    pub instances: usize,
    /// Managed instance groups (multi-host and flex-start slices).
    pub groups: usize,
    pub resize_requests: usize,
}

/// How a TrainingPipeline trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Training {
    /// Preprocess batch, then a Vertex AI custom job.
    Vertex,
    /// No preprocessing; an owned TpuSlice runs the container (TPU VM mode), on a spot TPU API
    /// node or on one of the Compute Engine capacities.
    TpuVm(Capacity),
}

pub fn slice(name: &str, capacity: Capacity) -> TpuSlice {
    let mut spec = json!({
        "project": PROJECT,
        "zone": ZONE,
        "labels": {"team": "ml"},
        "deletionPolicy": "Delete"
    });
    merge(&mut spec, capacity.spec());
    from(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": name},
        "spec": spec
    }))
}

/// Gives `slice` a training container that checkpoints into `gs://BUCKET/ckpt/<name>/` and
/// records its end under `gs://BUCKET/out/<name>/`, as a TPU VM pipeline's slice has; the
/// emulated run lasts 12 h of cloud time (its default is 10 min), so it is still training when
/// a maintenance comes.
pub fn checkpointing(slice: &mut TpuSlice, world: &crate::world::World) {
    let name = slice.metadata.name.clone().unwrap_or_default();
    let out = format!("gs://{BUCKET}/out/{name}/");
    let done = (tpu_operator_api::tpu_slice::DONE_URI_ANNOTATION.to_string(), out);
    slice.metadata.annotations.get_or_insert_default().extend([done]);
    slice.spec.workload = Some(
        serde_json::from_value(json!({
            "image": "us-docker.pkg.dev/demo-project/trainers/jax-trainer:1.0",
            "env": [{"name": "CHECKPOINT_DIR", "value": format!("gs://{BUCKET}/ckpt/{name}/")}]
        }))
        .expect("a container spec"),
    );
    let mut cfg = world.gcp.config();
    cfg.durations.tpu_workload = std::time::Duration::from_secs(12 * 3600);
    world.gcp.set_config(cfg);
}

/// The `training.tpuVm.slice` of a TPU VM pipeline.
fn tpu_vm_slice(capacity: Capacity) -> Value {
    let mut slice = json!({"zone": ZONE});
    merge(&mut slice, capacity.spec());
    slice
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}

pub fn batch(name: &str) -> PreprocessBatch {
    let out = format!("gs://{BUCKET}/out/{name}/");
    from(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "PreprocessBatch",
        "metadata": {"name": name},
        "spec": {
            "project": PROJECT,
            "region": "us-central1",
            "pyspark": {
                "mainPythonFileUri": format!("gs://{BUCKET}/scripts/tokenize.py"),
                "args": [format!("gs://{BUCKET}/raw/"), out.clone()]
            },
            "runtime": {"version": "2.2"},
            "inputs": [format!("gs://{BUCKET}/raw/")],
            "outputUri": out,
            "maxRetries": 1,
            "labels": {"team": "ml"},
            "deletionPolicy": "Delete"
        }
    }))
}

pub fn pipeline(name: &str, training: Training) -> TrainingPipeline {
    let artifacts = json!({
        "rawData": format!("gs://{BUCKET}/raw/"),
        "processedData": format!("gs://{BUCKET}/processed/{name}/"),
        "modelDir": format!("gs://{BUCKET}/models/{name}/")
    });
    let spec = match training {
        Training::Vertex => json!({
            "project": PROJECT,
            "region": "us-east5",
            "artifacts": artifacts,
            "preprocess": {
                "pyspark": {
                    "mainPythonFileUri": format!("gs://{BUCKET}/scripts/preprocess.py"),
                    "args": ["--input=$(RAW_DATA)", "--output=$(PROCESSED_DATA)"]
                },
                "runtime": {"version": "2.2"}
            },
            "training": {"vertex": {
                "machineType": "ct6e-standard-4t",
                "tpuTopology": "2x2",
                "container": {
                    "image": "us-docker.pkg.dev/demo-project/trainers/jax-trainer:1.0",
                    "args": ["--data=$(PROCESSED_DATA)", "--model-dir=$(MODEL_DIR)"]
                },
                "scheduling": {"timeout": "24h", "strategy": "Spot"}
            }},
            "maxRetries": 1,
            "deletionPolicy": "Delete"
        }),
        Training::TpuVm(capacity) => json!({
            "project": PROJECT,
            "region": "us-east5",
            "artifacts": artifacts,
            "training": {"tpuVm": {
                "slice": tpu_vm_slice(capacity),
                "container": {
                    "image": "us-docker.pkg.dev/demo-project/trainers/jax-trainer:1.0",
                    "args": ["--data=$(PROCESSED_DATA)", "--model-dir=$(MODEL_DIR)"]
                }
            }},
            "maxRetries": 1,
            "deletionPolicy": "Delete"
        }),
    };
    from(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TrainingPipeline",
        "metadata": {"name": name},
        "spec": spec
    }))
}

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("fixture deserializes into its CRD type")
}
