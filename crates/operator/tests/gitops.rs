//! GitOps health of the three kinds, on the statuses the controllers write (the api crate's status
//! types, filled by `set_kstatus` as every controller does):
//! - Argo CD: deploy/argocd/argocd-cm.yaml's Lua health checks (generated from
//!   deploy/argocd/health.lua) run in a real Lua 5.4 (mlua): Healthy on Ready, Progressing on
//!   Reconciling / stale generation / no status, Degraded on Stalled, Suspended when suspended.
//! - Flux: kstatus's generic rules (shared/notes/status-conventions.md) give Current / InProgress /
//!   Failed / Terminating for the same samples, so `Kustomization.spec.wait` and `healthChecks`
//!   work without `healthCheckExprs`.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use mlua::Lua;
use serde_json::{Value, json};
use tpu_operator_api::{
    conditions::{Progress, reasons, set_kstatus},
    preprocess_batch::{PreprocessBatchPhase, PreprocessBatchStatus},
    tpu_slice::{TpuSlicePhase, TpuSliceStatus},
    training_pipeline::{TrainingPipelinePhase, TrainingPipelineStatus},
};

const KINDS: [&str; 3] = ["TpuSlice", "PreprocessBatch", "TrainingPipeline"];

/// One sample: how the object looks and what Argo CD and kstatus must say about it.
struct Sample {
    what: &'static str,
    object: Value,
    argo: &'static str,
    kstatus: &'static str,
}

fn conditions(progress: Progress, reason: &str, generation: i64) -> Vec<Condition> {
    let mut c = Vec::new();
    set_kstatus(
        &mut c,
        progress,
        reason,
        "sample message",
        Some(generation),
        Time(Timestamp::now()),
    );
    c
}

/// The status a controller writes for `progress`, serialized by the api crate's types.
fn status(kind: &str, progress: Progress, reason: &str, observed: i64) -> Value {
    let conditions = conditions(progress, reason, observed);
    let observed_generation = Some(observed);
    match kind {
        "TpuSlice" => serde_json::to_value(TpuSliceStatus {
            observed_generation,
            phase: match progress {
                Progress::Ready => TpuSlicePhase::Ready,
                Progress::Reconciling => TpuSlicePhase::Queued,
                Progress::Stalled => TpuSlicePhase::Failed,
                Progress::Idle => TpuSlicePhase::Pending,
            },
            conditions,
            ..Default::default()
        }),
        "PreprocessBatch" => serde_json::to_value(PreprocessBatchStatus {
            observed_generation,
            phase: match progress {
                Progress::Ready => PreprocessBatchPhase::Succeeded,
                Progress::Reconciling => PreprocessBatchPhase::Running,
                Progress::Stalled => PreprocessBatchPhase::Failed,
                Progress::Idle => PreprocessBatchPhase::Pending,
            },
            conditions,
            ..Default::default()
        }),
        "TrainingPipeline" => serde_json::to_value(TrainingPipelineStatus {
            observed_generation,
            phase: match progress {
                Progress::Ready => TrainingPipelinePhase::Succeeded,
                Progress::Reconciling => TrainingPipelinePhase::Training,
                Progress::Stalled => TrainingPipelinePhase::Failed,
                Progress::Idle => TrainingPipelinePhase::Suspended,
            },
            conditions,
            ..Default::default()
        }),
        other => panic!("unknown kind {other}"),
    }
    .unwrap()
}

fn object(kind: &str, generation: i64, status: Option<Value>) -> Value {
    let mut o = json!({
        "apiVersion": "tpu-operator.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": "sample", "namespace": "ml", "generation": generation, "uid": "0d9c2c3e-8d0a-4c59-9d7e-6a4d0cf6c1a2"},
        "spec": {},
    });
    if let Some(s) = status {
        o["status"] = s;
    }
    o
}

fn samples(kind: &str) -> Vec<Sample> {
    let (ready, running, failed) = match kind {
        "TpuSlice" => (
            reasons::NODE_READY,
            reasons::WAITING_FOR_CAPACITY,
            reasons::QUOTA_EXCEEDED,
        ),
        "PreprocessBatch" => (reasons::SUCCEEDED, reasons::RUNNING, reasons::RETRIES_EXHAUSTED),
        _ => (reasons::SUCCEEDED, reasons::RUNNING, reasons::FAILED),
    };
    let mut s = vec![
        Sample {
            what: "Ready",
            object: object(kind, 1, Some(status(kind, Progress::Ready, ready, 1))),
            argo: "Healthy",
            kstatus: "Current",
        },
        Sample {
            what: "Reconciling",
            object: object(kind, 1, Some(status(kind, Progress::Reconciling, running, 1))),
            argo: "Progressing",
            kstatus: "InProgress",
        },
        Sample {
            what: "Stalled",
            object: object(kind, 1, Some(status(kind, Progress::Stalled, failed, 1))),
            argo: "Degraded",
            kstatus: "Failed",
        },
        Sample {
            // The spec changed (generation 2) and the controller has not caught up: the old Ready
            // must not count.
            what: "stale generation",
            object: object(kind, 2, Some(status(kind, Progress::Ready, ready, 1))),
            argo: "Progressing",
            kstatus: "InProgress",
        },
        Sample {
            // Just applied, never reconciled. kstatus calls this Current (its documented corner
            // case: no observedGeneration and no conditions); the operator's first reconcile writes
            // Reconciling within seconds. Argo CD's check says Progressing.
            what: "no status",
            object: object(kind, 1, None),
            argo: "Progressing",
            kstatus: "Current",
        },
        Sample {
            what: "deleting",
            object: {
                let mut o = object(
                    kind,
                    2,
                    Some(status(kind, Progress::Reconciling, reasons::DELETING, 2)),
                );
                o["metadata"]["deletionTimestamp"] = json!("2026-11-23T10:00:00Z");
                o["metadata"]["finalizers"] = json!(["tpu-operator.dev/cleanup"]);
                o
            },
            argo: "Progressing",
            kstatus: "Terminating",
        },
    ];
    if kind == "TrainingPipeline" {
        s.push(Sample {
            what: "suspended",
            object: object(kind, 3, Some(status(kind, Progress::Idle, reasons::SUSPENDED, 3))),
            argo: "Suspended",
            kstatus: "InProgress",
        });
    }
    s
}

/// The health scripts as users install them: argocd-cm's data, one per kind.
fn argocd_scripts() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/argocd/argocd-cm.yaml");
    let cm: Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    cm["data"].clone()
}

fn to_lua(lua: &Lua, v: &Value) -> mlua::Result<mlua::Value> {
    Ok(match v {
        Value::Null => mlua::Value::Nil,
        Value::Bool(b) => mlua::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => mlua::Value::Integer(i),
            None => mlua::Value::Number(n.as_f64().unwrap()),
        },
        Value::String(s) => mlua::Value::String(lua.create_string(s)?),
        Value::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.set(i + 1, to_lua(lua, item)?)?;
            }
            mlua::Value::Table(t)
        }
        Value::Object(m) => {
            let t = lua.create_table()?;
            for (k, item) in m {
                t.set(k.as_str(), to_lua(lua, item)?)?;
            }
            mlua::Value::Table(t)
        }
    })
}

/// Runs an Argo CD health script as Argo CD does: `obj` global, the chunk returns {status, message}.
fn argo_health(script: &str, obj: &Value) -> (String, String) {
    let lua = Lua::new();
    lua.globals().set("obj", to_lua(&lua, obj).unwrap()).unwrap();
    let hs: mlua::Table = lua.load(script).eval().expect("the health script runs");
    (
        hs.get::<String>("status").unwrap(),
        hs.get::<String>("message").unwrap_or_default(),
    )
}

/// kstatus's generic algorithm for custom resources (cli-utils pkg/kstatus/status/generic.go).
fn kstatus(obj: &Value) -> &'static str {
    if !obj["metadata"]["deletionTimestamp"].is_null() {
        return "Terminating";
    }
    let status = &obj["status"];
    if let Some(observed) = status["observedGeneration"].as_i64()
        && Some(observed) != obj["metadata"]["generation"].as_i64()
    {
        return "InProgress";
    }
    let is_true = |t: &str| {
        status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == t && c["status"] == "True")
    };
    let present = |t: &str| {
        status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == t)
    };
    if is_true("Reconciling") {
        "InProgress"
    } else if is_true("Stalled") {
        "Failed"
    } else if is_true("Ready") || !present("Ready") {
        "Current"
    } else {
        "InProgress"
    }
}

#[test]
fn argocd_health_checks_map_the_status_of_every_kind() {
    let scripts = argocd_scripts();
    for kind in KINDS {
        let key = format!("resource.customizations.health.tpu-operator.dev_{kind}");
        let script = scripts[&key]
            .as_str()
            .unwrap_or_else(|| panic!("argocd-cm has no {key}"));
        for sample in samples(kind) {
            let (status, message) = argo_health(script, &sample.object);
            assert_eq!(status, sample.argo, "{kind} {}: {message}", sample.what);
            assert!(
                !message.is_empty(),
                "{kind} {}: Argo CD shows the message; it must say why",
                sample.what
            );
        }
    }
}

#[test]
fn argocd_degraded_and_progressing_messages_carry_the_reason() {
    let script = argocd_scripts()["resource.customizations.health.tpu-operator.dev_TpuSlice"]
        .as_str()
        .unwrap()
        .to_string();
    let stalled = object(
        "TpuSlice",
        1,
        Some(status("TpuSlice", Progress::Stalled, reasons::QUOTA_EXCEEDED, 1)),
    );
    assert_eq!(
        argo_health(&script, &stalled),
        ("Degraded".into(), "QuotaExceeded: sample message".into())
    );
    let queued = object(
        "TpuSlice",
        4,
        Some(status(
            "TpuSlice",
            Progress::Reconciling,
            reasons::WAITING_FOR_CAPACITY,
            4,
        )),
    );
    assert_eq!(
        argo_health(&script, &queued).1,
        "WaitingForCapacity: sample message"
    );
    let stale = object(
        "TpuSlice",
        5,
        Some(status("TpuSlice", Progress::Ready, reasons::NODE_READY, 4)),
    );
    assert_eq!(
        argo_health(&script, &stale).1,
        "Waiting for the operator to observe generation 5"
    );
}

#[test]
fn kstatus_reads_the_status_of_every_kind() {
    for kind in KINDS {
        for sample in samples(kind) {
            assert_eq!(kstatus(&sample.object), sample.kstatus, "{kind} {}", sample.what);
        }
    }
}

#[test]
fn controllers_never_publish_contradicting_conditions() {
    // kstatus checks Reconciling before Stalled and Argo CD checks Stalled first; they agree only
    // because the two are never True together. set_kstatus guarantees it for every Progress.
    for progress in [
        Progress::Ready,
        Progress::Reconciling,
        Progress::Stalled,
        Progress::Idle,
    ] {
        let c = conditions(progress, "Any", 1);
        let trues = c.iter().filter(|c| c.status == "True").count();
        assert!(trues <= 1, "{progress:?}: {c:?}");
        assert_eq!(
            c.len(),
            3,
            "Ready, Reconciling and Stalled are always all present"
        );
    }
}
