//! Work in every phase, kept in Git as the previous release's users wrote it (`v1alpha1`, from
//! that release's examples), and driven there on gcp-emulator's manual clock.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::cluster::Cli;
use crate::previous::Release;

pub const NS: &str = "upgrade";
pub const MANAGER: &str = "gitops";
/// The zone the queued slice waits in (stocked out until the test lifts it).
pub const QUEUED_ZONE: &str = "us-east5-a";
pub const ZONE: &str = "us-east5-b";
const BUCKET: &str = "demo-project-tpu-data";
/// The staging bucket of the previous release's batch example.
const STAGING: &str = "demo-project-dataproc-staging";

// Every read names `v1alpha1`, the version both releases serve, instead of kubectl's preferred
// one: this suite deletes the CRDs a suite before it left (serving `v1beta1` too) and installs the
// previous release's, and kube-apiserver's discovery went on offering the removed `v1beta1` for
// minutes (CI, 2026-11-30), so an unqualified `kubectl get tpuslices` asked for a version no
// longer served; `--ignore-not-found` then read as "no object".
const SLICES: &str = "tpuslices.v1alpha1.tpu-operator.dev";
const BATCHES: &str = "preprocessbatches.v1alpha1.tpu-operator.dev";
const PIPELINES: &str = "trainingpipelines.v1alpha1.tpu-operator.dev";

/// Every kind the workload has, for one `kubectl get` or `delete`.
pub fn kinds() -> String {
    [SLICES, BATCHES, PIPELINES].join(",")
}

/// One object of the workload: its kind (kubectl's resource, version-qualified, and the kind's
/// name) and name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Obj {
    pub resource: &'static str,
    pub kind: &'static str,
    pub name: &'static str,
}

pub const READY: Obj = slice("up-ready");
pub const CREATING: Obj = slice("up-creating");
pub const QUEUED: Obj = slice("up-queued");
pub const RUNNING: Obj = Obj {
    resource: BATCHES,
    kind: "PreprocessBatch",
    name: "up-running",
};
pub const PREPROCESSING: Obj = pipeline("up-preprocessing");
pub const TRAINING: Obj = pipeline("up-training");
pub const SUSPENDED: Obj = pipeline("up-suspended");
pub const FAILED: Obj = pipeline("up-failed");
pub const ALL: [Obj; 8] = [
    READY,
    CREATING,
    QUEUED,
    RUNNING,
    PREPROCESSING,
    TRAINING,
    SUSPENDED,
    FAILED,
];

const fn slice(name: &'static str) -> Obj {
    Obj {
        resource: SLICES,
        kind: "TpuSlice",
        name,
    }
}

const fn pipeline(name: &'static str) -> Obj {
    Obj {
        resource: PIPELINES,
        kind: "TrainingPipeline",
        name,
    }
}

/// The namespace's policy, then the manifests of `objs`, as one Git directory would hold them.
pub fn manifests(release: &Release, objs: &[Obj]) -> String {
    let mut docs = Vec::new();
    for obj in objs {
        docs.push(manifest(release, *obj));
    }
    docs.iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// The TpuPolicy letting the namespace run all of it at once.
pub fn policy() -> String {
    json!({
        "apiVersion": "tpu-operator.dev/v1alpha1",
        "kind": "TpuPolicy",
        "metadata": {"name": NS},
        "spec": {"namespaces": [NS], "maxChips": 64, "maxSpendPerHourUsd": 1000, "allowedBuckets": [BUCKET, STAGING]}
    })
    .to_string()
}

fn manifest(release: &Release, obj: Obj) -> Value {
    let mut doc = match obj.resource {
        SLICES => slice_manifest(obj),
        BATCHES => {
            let mut doc: Value =
                serde_yaml::from_str(&release.file("examples/preprocess-batch.yaml")).unwrap();
            let out = format!("gs://{BUCKET}/upgrade/{}/", obj.name);
            doc["spec"]["outputUri"] = json!(out);
            doc["spec"]["pyspark"]["args"][1] = json!(out);
            doc
        }
        _ => {
            let mut doc: Value = serde_yaml::from_str(&release.file("examples/quickstart.yaml")).unwrap();
            let artifacts = &mut doc["spec"]["artifacts"];
            artifacts["processedData"] = json!(format!("gs://{BUCKET}/upgrade/processed/{}/", obj.name));
            artifacts["modelDir"] = json!(format!("gs://{BUCKET}/upgrade/models/{}/", obj.name));
            if obj == SUSPENDED {
                doc["spec"]["suspend"] = json!(true);
            }
            if obj == FAILED {
                // Its preprocessing fails once, for good.
                doc["spec"]["maxRetries"] = json!(0);
            }
            doc
        }
    };
    assert_eq!(
        doc["apiVersion"], "tpu-operator.dev/v1alpha1",
        "{obj:?}: the previous release's version"
    );
    doc["metadata"]["name"] = json!(obj.name);
    doc["metadata"]["namespace"] = json!(NS);
    doc
}

/// A standalone TPU API slice: on demand (a node; `CREATING` for three minutes of cloud time),
/// or queued in the stocked-out zone.
fn slice_manifest(obj: Obj) -> Value {
    let (zone, capacity) = if obj == QUEUED {
        (
            QUEUED_ZONE,
            json!({"queued": {"tier": "Spot", "validUntilDuration": "6h"}}),
        )
    } else {
        (ZONE, json!({"onDemand": {}}))
    };
    json!({
        "apiVersion": "tpu-operator.dev/v1alpha1",
        "kind": "TpuSlice",
        "metadata": {},
        "spec": {
            "project": "demo-project",
            "zone": zone,
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": capacity,
            "labels": {"team": "ml"},
            "deletionPolicy": "Delete"
        }
    })
}

/// Applies `yaml` as a GitOps tool does: server-side, as its own field manager.
pub fn apply(cli: &Cli, file: &str, yaml: &str) {
    let path = cli.file(file, yaml);
    cli.kubectl(&[
        "apply",
        "--server-side",
        "--field-manager",
        MANAGER,
        "-f",
        path.to_str().unwrap(),
    ]);
}

/// Every object's `status.phase` (empty before its first status, and once it is gone), read
/// in one list of the namespace.
pub fn phases(cli: &Cli) -> BTreeMap<Obj, String> {
    let listed = cli.kubectl(&[
        "get",
        &kinds(),
        "-n",
        NS,
        "-o",
        "jsonpath={range .items[*]}{.kind}/{.metadata.name}={.status.phase}{\"\\n\"}{end}",
    ]);
    let listed: BTreeMap<&str, &str> = listed.lines().filter_map(|l| l.split_once('=')).collect();
    ALL.into_iter()
        .map(|obj| {
            let phase = listed.get(format!("{}/{}", obj.kind, obj.name).as_str());
            (obj, phase.copied().unwrap_or_default().to_string())
        })
        .collect()
}

/// The cloud resource of `kind` (`nodes`, `queued`, `batches`, `jobs`) labelled as belonging to
/// `name` (a queued resource carries its labels on its node spec, and its id starts with the
/// object's namespace and name), if there is one.
pub fn cloud(gcp: &gcp_emulator::Emulator, kind: &str, name: &str) -> Option<Value> {
    let owned = |r: &Value| r["labels"]["tpu-operator-name"] == name;
    let id_prefix = format!("/{NS}-{name}-");
    match kind {
        "nodes" => gcp.nodes().into_iter().find(owned),
        "queued" => gcp
            .queued_resources()
            .into_iter()
            .find(|r| r["name"].as_str().is_some_and(|n| n.contains(&id_prefix))),
        "batches" => gcp.batches().into_iter().find(owned),
        _ => gcp.custom_jobs().into_iter().find(owned),
    }
}

/// The state of [`cloud`]'s resource.
pub fn cloud_state(gcp: &gcp_emulator::Emulator, kind: &str, name: &str) -> Option<String> {
    let r = cloud(gcp, kind, name)?;
    let state = if kind == "queued" {
        &r["state"]["state"]
    } else {
        &r["state"]
    };
    Some(state.as_str().unwrap_or("?").to_string())
}
