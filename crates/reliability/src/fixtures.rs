//! Objects of the three kinds, small enough to converge in a few hundred milliseconds on the
//! emulators' manual clock. Every pipeline and batch gets artifact paths of its own, so many of
//! them can live in one emulator without sharing outputs.

use serde_json::{Value, json};
use tpu_operator_api::{PreprocessBatch, TpuSlice, TrainingPipeline};

pub const PROJECT: &str = "demo-project";
pub const BUCKET: &str = "demo-project-tpu-data";
pub const ZONE: &str = "us-east5-b";
/// The object every batch and pipeline reads; `World::seed_inputs` uploads it.
pub const RAW_OBJECT: &str = "raw/part-00000";

/// How a TpuSlice gets its capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capacity {
    /// `nodes.create` with `spot: {}`.
    SpotNode,
    /// `queuedResources.create` (spot tier).
    Queued,
}

/// How a TrainingPipeline trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Training {
    /// Preprocess batch, then a Vertex AI custom job.
    Vertex,
    /// No preprocessing; an owned TpuSlice runs the container (TPU VM mode).
    TpuVm,
}

pub fn slice(name: &str, capacity: Capacity) -> TpuSlice {
    let capacity = match capacity {
        Capacity::SpotNode => json!({"spot": {}}),
        Capacity::Queued => json!({"queued": {"tier": "Spot", "validUntilDuration": "6h"}}),
    };
    from(json!({
        "apiVersion": "tpu-operator.dev/v1alpha1",
        "kind": "TpuSlice",
        "metadata": {"name": name},
        "spec": {
            "project": PROJECT,
            "zone": ZONE,
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": capacity,
            "labels": {"team": "ml"},
            "deletionPolicy": "Delete"
        }
    }))
}

pub fn batch(name: &str) -> PreprocessBatch {
    let out = format!("gs://{BUCKET}/out/{name}/");
    from(json!({
        "apiVersion": "tpu-operator.dev/v1alpha1",
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
        Training::TpuVm => json!({
            "project": PROJECT,
            "region": "us-east5",
            "artifacts": artifacts,
            "training": {"tpuVm": {
                "slice": {
                    "zone": ZONE,
                    "acceleratorType": "v6e-8",
                    "runtimeVersion": "v2-alpha-tpuv6e",
                    "capacity": {"spot": {}}
                },
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
        "apiVersion": "tpu-operator.dev/v1alpha1",
        "kind": "TrainingPipeline",
        "metadata": {"name": name},
        "spec": spec
    }))
}

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("fixture deserializes into its CRD type")
}
