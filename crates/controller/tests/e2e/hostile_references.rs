//! References a hostile tenant writes into a spec (issue 32, items 5, 6, 10, 11): another
//! project's reservation, another project's boot image, path traversal and foreign hosts in
//! network names, and other teams' buckets. Each is refused by the controller before any cloud
//! call (not one request reaches gcp-emulator, Cloud Storage included), reported as `Stalled`
//! reason `PolicyDenied` with a message naming the policy field, through the real controllers
//! against kube-emulator (or the real control plane) and gcp-emulator. The objects are written by
//! the namespace's tenant ([`tenant::as_tenant`]: its `edit` ServiceAccount on the real server).

use std::time::Duration;

use serde_json::json;
use test_kit::{Tenant, TestEnv};
use tpu_operator_api::{
    preprocess_batch::PreprocessBatch, tpu_slice::TpuSlice, training_pipeline::TrainingPipeline,
};

use crate::tenant;

use tenant::{denied_by, slice, stalled};

const STEP: Duration = Duration::from_secs(20);

/// Creates the policy, then starts the three controllers; returns the namespace's tenant, who
/// writes the references.
async fn start(env: &mut TestEnv, rules: serde_json::Value) -> Tenant {
    tenant::start(env, Some(rules)).await;
    tenant::as_tenant(env).await
}

/// Waits for the object `name` of kind `K` to be `Stalled`, and returns (reason, message).
async fn wait_stalled<K>(
    env: &TestEnv,
    name: &str,
    conditions: impl Fn(&K) -> Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
) -> (String, String)
where
    K: test_kit::NamespacedObject,
{
    let obj: K = env
        .wait_for(name, "Stalled", STEP, |o: &K| {
            conditions(o).is_some_and(|c| stalled(&c).is_some())
        })
        .await;
    stalled(&conditions(&obj).unwrap()).unwrap()
}

fn slice_conditions(s: &TpuSlice) -> Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>> {
    Some(s.status.as_ref()?.conditions.clone())
}

fn batch_conditions(
    b: &PreprocessBatch,
) -> Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>> {
    Some(b.status.as_ref()?.conditions.clone())
}

fn pipeline_conditions(
    t: &TrainingPipeline,
) -> Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>> {
    Some(t.status.as_ref()?.conditions.clone())
}

/// Not one request reached the cloud (any service: TPU, Compute Engine, Dataproc, Vertex,
/// Cloud Storage).
async fn no_cloud_call(env: &TestEnv) {
    env.idle(Duration::from_millis(300), STEP).await;
    let calls = env.gcp.calls();
    assert!(calls.is_empty(), "{calls:#?}");
}

/// Asserts `PolicyDenied` by `field` with `fragment` in the message.
fn assert_denied(
    env: &TestEnv,
    name: &str,
    (reason, message): (String, String),
    field: &str,
    fragment: &str,
) {
    assert_eq!(reason, "PolicyDenied", "{name}: {message}");
    assert!(
        message.contains(&denied_by(&env.ns, field)) && message.contains(fragment),
        "{name}: {message}"
    );
}

/// Item 5: `team-a` names `team-b`'s reservation by its full path (passed through unchecked
/// before); the reservation's project is not one of `allowedProjects`.
#[tokio::test]
async fn another_projects_reservation_is_refused_before_any_cloud_call() {
    let mut env = TestEnv::start().await;
    let tenant = start(
        &mut env,
        json!({"defaultProject": "team-a-proj", "allowedProjects": ["team-a-proj"]}),
    )
    .await;
    let theirs = "projects/team-b-proj/locations/us-east5-b/reservations/team-b-res";
    tenant
        .create(&slice(
            "reserved",
            json!({"capacity": {"reserved": {"reservationName": theirs}}}),
        ))
        .await;
    tenant
        .create(&slice(
            "queued",
            json!({"capacity": {"queued": {"reservationName": theirs}}}),
        ))
        .await;
    let got = wait_stalled(&env, "reserved", slice_conditions).await;
    assert_denied(
        &env,
        "reserved",
        got,
        "allowedProjects",
        &format!(
            "consumes reservation \"{theirs}\" (spec.capacity.reserved.reservationName) of project \"team-b-proj\""
        ),
    );
    let got = wait_stalled(&env, "queued", slice_conditions).await;
    assert_denied(
        &env,
        "queued",
        got,
        "allowedProjects",
        "(spec.capacity.queued.reservationName)",
    );
    no_cloud_call(&env).await;
}

/// Item 5, with `allowedReservations`: only the listed reservations, whatever their project.
#[tokio::test]
async fn reservations_outside_allowed_reservations_are_refused() {
    let mut env = TestEnv::start().await;
    let tenant = start(
        &mut env,
        json!({"defaultProject": "team-a-proj",
               "allowedReservations": ["projects/platform-proj/locations/us-east5-b/reservations/shared-*"]}),
    )
    .await;
    tenant
        .create(&slice(
            "own",
            json!({"capacity": {"reserved": {"reservationName": "not-shared"}}}),
        ))
        .await;
    let got = wait_stalled(&env, "own", slice_conditions).await;
    assert_denied(
        &env,
        "own",
        got,
        "allowedReservations",
        "consumes reservation \"projects/team-a-proj/locations/us-east5-b/reservations/not-shared\"",
    );
    no_cloud_call(&env).await;
}

/// Item 6: a Compute Engine slice booting another project's image. The default (no
/// `allowedImageProjects`) allows only the object's project and Google's public images.
#[tokio::test]
async fn another_projects_boot_image_is_refused_before_any_cloud_call() {
    let mut env = TestEnv::start().await;
    let tenant = start(&mut env, json!({"defaultProject": "team-a-proj"})).await;
    let compute = |image: &str| {
        json!({"provisioner": "ComputeEngine", "computeEngine": {"image": image},
               "runtimeVersion": "", "capacity": {"onDemand": {}}})
    };
    tenant
        .create(&slice(
            "foreign-image",
            compute("projects/team-b-proj/global/images/family/team-b-golden"),
        ))
        .await;
    let got = wait_stalled(&env, "foreign-image", slice_conditions).await;
    assert_denied(
        &env,
        "foreign-image",
        got,
        "allowedImageProjects",
        "boots image \"projects/team-b-proj/global/images/family/team-b-golden\" (spec.computeEngine.image) of project \"team-b-proj\"; allowed: team-a-proj, ubuntu-os-cloud",
    );
    no_cloud_call(&env).await;
}

/// Item 11: `..` segments in a slice's network and a Dataproc `networkUri` on a foreign host no
/// longer pass `allowedNetworks: [team-a-*]`; the message names the object's field and the forms
/// accepted.
#[tokio::test]
async fn network_traversal_and_foreign_hosts_are_refused_before_any_cloud_call() {
    let mut env = TestEnv::start().await;
    let tenant = start(
        &mut env,
        json!({"defaultProject": "team-a-proj", "allowedNetworks": ["team-a-*"],
               "allowedSubnetworks": ["team-a-*"]}),
    )
    .await;
    let traversal = "global/networks/team-a-x/../../../../team-b-train/global/networks/prod";
    tenant
        .create(&slice(
            "traversal",
            json!({"networkConfig": {"network": traversal}}),
        ))
        .await;
    tenant
        .create(&slice(
            "sub-traversal",
            json!({"networkConfig": {"network": "team-a-net",
                                 "subnetwork": "regions/us-east5/subnetworks/team-a-s/../../../../x"}}),
        ))
        .await;
    let batch: PreprocessBatch = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "PreprocessBatch",
        "metadata": {"name": "foreign-host"},
        "spec": {"region": "us-east5", "pyspark": {"mainPythonFileUri": "gs://team-a-code/s.py"},
                 "execution": {"networkUri":
                     "https://evil.example.com/compute/v1/projects/team-a-proj/global/networks/team-a-x"}}
    }))
    .unwrap();
    tenant.create(&batch).await;

    let got = wait_stalled(&env, "traversal", slice_conditions).await;
    assert_denied(
        &env,
        "traversal",
        got,
        "allowedNetworks",
        &format!(
            "spec.networkConfig.network: \"{traversal}\" is not a network reference the operator accepts (accepted: NAME, global/networks/NAME, projects/PROJECT/global/networks/NAME or https://www.googleapis.com/compute/v1/"
        ),
    );
    let got = wait_stalled(&env, "sub-traversal", slice_conditions).await;
    assert_denied(
        &env,
        "sub-traversal",
        got,
        "allowedSubnetworks",
        "spec.networkConfig.subnetwork: \"regions/us-east5/subnetworks/team-a-s/../../../../x\" is not a subnetwork reference",
    );
    let got = wait_stalled(&env, "foreign-host", batch_conditions).await;
    assert_denied(
        &env,
        "foreign-host",
        got,
        "allowedNetworks",
        "spec.execution.networkUri: \"https://evil.example.com/",
    );
    no_cloud_call(&env).await;
}

/// Item 10: with `allowedBuckets`, an input path, a checkpoint directory or a model directory in
/// another team's bucket is refused before the operator reads anything with its identity (no
/// Cloud Storage call: nothing about the other team's objects is learnt).
#[tokio::test]
async fn other_teams_buckets_are_refused_before_any_storage_read() {
    let mut env = TestEnv::start().await;
    let tenant = start(
        &mut env,
        json!({"defaultProject": "team-a-proj", "allowedBuckets": ["team-a-*"]}),
    )
    .await;
    let batch: PreprocessBatch = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "PreprocessBatch",
        "metadata": {"name": "probe-input"},
        "spec": {"region": "us-east5", "pyspark": {"mainPythonFileUri": "gs://team-a-code/s.py"},
                 "inputs": ["gs://team-a-data/raw/", "gs://team-b-data/secret-project/"]}
    }))
    .unwrap();
    tenant.create(&batch).await;
    let pipeline = |name: &str, artifacts: serde_json::Value| -> TrainingPipeline {
        serde_json::from_value(json!({
            "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TrainingPipeline",
            "metadata": {"name": name},
            "spec": {"region": "us-east5", "artifacts": artifacts,
                     "training": {"tpuVm": {
                         "slice": {"zone": "us-east5-b", "acceleratorType": "v6e-8",
                                   "runtimeVersion": "v2-alpha-tpuv6e", "capacity": {"spot": {}}},
                         "container": {"image": "us-docker.pkg.dev/p/r/t:1"}}}}
        }))
        .unwrap()
    };
    tenant
        .create(&pipeline(
            "probe-ckpt",
            json!({"modelDir": "gs://team-a-models/m/", "checkpointDir": "gs://team-b-ckpt/run-7/"}),
        ))
        .await;
    tenant
        .create(&pipeline(
            "probe-model",
            json!({"modelDir": "gs://team-b-models/run-1/"}),
        ))
        .await;

    let got = wait_stalled(&env, "probe-input", batch_conditions).await;
    assert_denied(
        &env,
        "probe-input",
        got,
        "allowedBuckets",
        "names bucket \"team-b-data\" (spec.inputs[1] = \"gs://team-b-data/secret-project/\"); allowed: team-a-*",
    );
    let got = wait_stalled(&env, "probe-ckpt", pipeline_conditions).await;
    assert_denied(
        &env,
        "probe-ckpt",
        got,
        "allowedBuckets",
        "names bucket \"team-b-ckpt\" (spec.artifacts.checkpointDir",
    );
    let got = wait_stalled(&env, "probe-model", pipeline_conditions).await;
    assert_denied(
        &env,
        "probe-model",
        got,
        "allowedBuckets",
        "(spec.artifacts.modelDir = \"gs://team-b-models/run-1/\")",
    );
    no_cloud_call(&env).await;
}

/// Every project a spec names is checked (issue 47): a Vertex job streaming to another team's
/// TensorBoard (`projects/team-b-proj/...`) is refused by `allowedProjects`, naming the field,
/// before its create (the pipeline only listed the jobs of its own, allowed, project); before,
/// the job's own project was all that was checked and the job was created.
#[tokio::test]
async fn another_projects_tensorboard_is_refused_before_its_job_is_created() {
    let mut env = TestEnv::start().await;
    let tenant = start(
        &mut env,
        json!({"defaultProject": "team-a-proj", "allowedProjects": ["team-a-proj"],
               "allowedBuckets": ["demo-project-tpu-data"]}),
    )
    .await;
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
    tp.metadata.name = Some("board".into());
    tp.spec.project = Some("team-a-proj".into());
    tp.spec.preprocess = None;
    tp.spec.artifacts.processed_data = None;
    let vertex = tp
        .spec
        .training
        .vertex
        .as_mut()
        .expect("the quickstart trains on Vertex");
    vertex.tensorboard = Some("projects/team-b-proj/locations/us-east5/tensorboards/42".into());
    tenant.create(&tp).await;
    let got = wait_stalled(&env, "board", pipeline_conditions).await;
    assert_denied(
        &env,
        "board",
        got,
        "allowedProjects",
        "names \"projects/team-b-proj/locations/us-east5/tensorboards/42\" (spec.training.vertex.tensorboard) in project \"team-b-proj\"; allowed: team-a-proj",
    );
    env.idle(Duration::from_millis(300), STEP).await;
    let calls = env.gcp.calls();
    assert!(
        calls
            .iter()
            .all(|c| c.http_method == "GET" && c.path.contains("/projects/team-a-proj/")),
        "only reads of team A's own project: {calls:#?}"
    );
    assert_eq!(env.gcp.custom_jobs().len(), 0);
}
