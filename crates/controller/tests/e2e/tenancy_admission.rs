//! Tenancy as policy objects, the way a platform team runs it (issue 20): TpuPolicy objects, the
//! chart's ValidatingAdmissionPolicy (the generated file the chart ships, bound as the chart binds
//! it), the controllers and the usage report, against kube-emulator or the real control plane
//! (`TPU_OPERATOR_KUBE=real`, where kube-apiserver itself evaluates the CEL).
//!
//! Every forbidden field the object alone decides is refused at create time, naming the policy
//! and the field; what needs usage (the chip quota) is refused by the controller with 0 cloud
//! calls; allowed objects converge; the policy's status shows chips coming and going. A second
//! team's namespace, selected by label by a policy of its own, gets that policy and not the
//! first team's. Each team's objects are written by its tenant (`crate::tenant::as_tenant`: on
//! the real server its namespace's `edit` ServiceAccount under the chart's aggregated roles, so
//! the refusals are admission's, not RBAC's); policies, namespaces and the admission policy
//! are the administrator's.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use serde_json::json;
use test_kit::{Tenant, TestEnv};
use tpu_operator_api::{
    PreprocessBatch, TpuSlice, TrainingPipeline,
    conditions::{find_condition, types},
    tpu_policy::TpuPolicy,
};
use tpu_operator_controller::{
    Shutdown,
    governance::tenancy,
    kinds::{preprocess_batch, tpu_slice, training_pipeline},
    never_shutdown,
};

const STEP: Duration = Duration::from_secs(20);
/// Marks this test's namespaces; the admission binding selects only them.
const TEST_LABEL: &str = "tpu-operator.dev/admission-test";

/// Creates (or labels) a namespace with `labels` plus this test's marker.
async fn label_namespace(env: &TestEnv, name: &str, labels: serde_json::Value) {
    use k8s_openapi::api::core::v1::Namespace;
    let api = Api::<Namespace>::all(env.client.clone());
    let mut all = labels;
    all[TEST_LABEL] = json!(env.ns);
    if api.get_opt(name).await.unwrap().is_none() {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        api.create(&PostParams::default(), &ns).await.unwrap();
    }
    let patch = json!({"metadata": {"labels": all}});
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
}

/// The chart's policy spec, bound to the test's namespace only (a real API server is shared by
/// the tests running in parallel; the chart binds every namespace, or the watched one).
async fn install_admission(env: &TestEnv) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../charts/tpu-operator/files/admission-policy-spec.yaml"
    );
    let spec: serde_json::Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let name = format!("tpupolicy-{}", env.ns);
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    let mut binding_spec = tpu_operator_api::admission::binding_spec(&name);
    binding_spec["matchResources"] = json!({"namespaceSelector": {"matchLabels": {TEST_LABEL: env.ns}}});
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name}, "spec": binding_spec,
    }))
    .unwrap();
    Api::<ValidatingAdmissionPolicy>::all(env.client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect(
            "the API server accepts the chart's ValidatingAdmissionPolicy (CEL compiles and type-checks)",
        );
    Api::<ValidatingAdmissionPolicyBinding>::all(env.client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("create the binding");
    name
}

async fn remove_admission(env: &TestEnv, name: &str) {
    let dp = DeleteParams::default();
    let _ = Api::<ValidatingAdmissionPolicyBinding>::all(env.client.clone())
        .delete(name, &dp)
        .await;
    let _ = Api::<ValidatingAdmissionPolicy>::all(env.client.clone())
        .delete(name, &dp)
        .await;
    for p in [format!("tenant-{}", env.ns), format!("other-{}", env.ns)] {
        let _ = Api::<TpuPolicy>::all(env.client.clone()).delete(&p, &dp).await;
    }
}

fn policy(name: String, spec: serde_json::Value) -> TpuPolicy {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuPolicy",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

fn slice(name: &str, extra: serde_json::Value) -> TpuSlice {
    let mut spec = json!({"zone": "us-east5-b", "acceleratorType": "v6e-8",
                          "runtimeVersion": "v2-alpha-tpuv6e", "capacity": {"spot": {}}});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    serde_json::from_value(
        json!({"apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuSlice",
                                  "metadata": {"name": name}, "spec": spec}),
    )
    .unwrap()
}

/// Creates `obj` as `team_a` until admission refuses it (a real API server takes a moment to
/// load a new policy; anything admitted meanwhile is deleted again) and returns the refusal's
/// message.
async fn refused<K>(team_a: &Tenant, obj: &K) -> String
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let api: Api<K> = team_a.api();
    let name = obj.meta().name.clone().unwrap();
    for _ in 0..120 {
        match api.create(&PostParams::default(), obj).await {
            Err(kube::Error::Api(e)) if e.code == 403 || e.code == 422 => return e.message,
            Err(e) => panic!("{name}: unexpected error {e}"),
            Ok(_) => {
                api.delete(&name, &DeleteParams::default()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    panic!("{name} was never refused at admission");
}

fn spawn_operator(env: &mut TestEnv, ctx: &Arc<tpu_operator_controller::Context>, stop: Shutdown) {
    env.spawn(tpu_slice::run(ctx.clone(), stop.clone()));
    env.spawn(preprocess_batch::run(ctx.clone(), stop.clone()));
    env.spawn(training_pipeline::run(ctx.clone(), stop.clone()));
    env.spawn(tenancy::report::run(
        ctx.tenancy.clone(),
        ctx.clock.clone(),
        ctx.config.clone(),
        stop,
    ));
}

#[tokio::test]
async fn forbidden_fields_are_refused_at_apply_and_usage_shows_in_the_policy() {
    let mut env = TestEnv::start().await;
    let ns = env.ns.clone();
    let tenant = format!("tenant-{ns}");
    let team_b = create_both_teams_policies(&env, &tenant).await;
    let admission = install_admission(&env).await;
    let ctx = Arc::new(env.context().await);
    spawn_operator(&mut env, &ctx, never_shutdown());
    let team_a = crate::tenant::as_tenant(&env).await;

    slices_with_forbidden_fields_are_refused_at_admission(&team_a, &tenant).await;
    batch_and_pipeline_with_forbidden_fields_are_refused_at_admission(&env, &team_a, &tenant).await;
    allowed_slice_converges_and_its_chips_show_in_the_policy(&env, &team_a, &tenant).await;
    over_the_chip_quota_the_controller_refuses_with_no_cloud_call(&env, &team_a, &tenant).await;
    chips_go_back_and_the_other_teams_policy_never_selects_this_namespace(&env, &team_a, &tenant).await;
    let team_b = crate::tenant::as_tenant_in(&env, &team_b).await;
    team_b_gets_its_own_policy_and_not_team_as(&env, &team_b).await;
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client.clone())
        .delete(&team_b.ns, &DeleteParams::default())
        .await;
    remove_admission(&env, &admission).await;
}

/// How a refusal by the policy `tenant` names `field`.
fn denied_by(tenant: &str, field: &str) -> String {
    format!("denied by TpuPolicy {tenant}, spec.{field}:")
}

/// Creates team A's policy `tenant` (the test's namespace) and team B's (a labelled namespace).
async fn create_both_teams_policies(env: &TestEnv, tenant: &str) -> String {
    let ns = env.ns.clone();
    let policies = Api::<TpuPolicy>::all(env.client.clone());
    policies
        .create(
            &PostParams::default(),
            &policy(
                tenant.to_owned(),
                json!({
                    "namespaces": [ns],
                    "defaultProject": "team-a-proj",
                    "allowedProjects": ["team-a-proj"],
                    "allowedRegions": ["us-east5"],
                    "allowedZones": ["us-east5-b"],
                    "allowedAccelerators": [{"family": "v6e", "maxChips": 8}],
                    "allowedCapacity": ["spot"],
                    "allowedServiceAccounts": ["*@team-a-proj.iam.gserviceaccount.com", "default"],
                    "allowedNetworks": ["default", "team-net"],
                    "maxChips": 8,
                }),
            ),
        )
        .await
        .unwrap();
    // Another team, in its own namespace selected by label, with a policy of its own that allows
    // what team A's forbids (another zone, on-demand) and forbids what team A's allows.
    let team_b = format!("b-{ns}");
    let team_b = &team_b[..team_b.len().min(63)];
    label_namespace(env, &ns, json!({})).await;
    label_namespace(env, team_b, json!({"team": team_b})).await;
    policies
        .create(
            &PostParams::default(),
            &policy(
                format!("other-{ns}"),
                json!({"namespaceSelector": {"matchLabels": {"team": team_b}},
                       "allowedZones": ["us-central2-b"], "allowedCapacity": ["onDemand"]}),
            ),
        )
        .await
        .unwrap();
    team_b.to_owned()
}

/// Every slice field the object alone decides is refused at create time, naming policy and field.
async fn slices_with_forbidden_fields_are_refused_at_admission(team_a: &Tenant, tenant: &str) {
    let cases = [
        ("proj", json!({"project": "other-proj"}), "allowedProjects"),
        ("zone", json!({"zone": "us-central2-b"}), "allowedZones"),
        (
            "family",
            json!({"acceleratorType": "v5p-8"}),
            "allowedAccelerators",
        ),
        (
            "size",
            json!({"acceleratorType": "v6e-16"}),
            "allowedAccelerators",
        ),
        (
            "capacity",
            json!({"capacity": {"onDemand": {}}}),
            "allowedCapacity",
        ),
        (
            "sa",
            json!({"serviceAccount": {"email": "admin@prod-proj.iam.gserviceaccount.com"}}),
            "allowedServiceAccounts",
        ),
        (
            "net",
            json!({"networkConfig": {"network": "prod-net"}}),
            "allowedNetworks",
        ),
        (
            "adopt",
            json!({"adoptNodeId": "someone-elses-node"}),
            "allowAdoption",
        ),
        // A capacity plan is judged rung by rung: a later rung the policy forbids is refused
        // now, naming what it asks.
        (
            "plan-kind",
            json!({"capacity": null, "capacityPlan": {"rungs": [{"spot": {}}, {"onDemand": {}}]}}),
            "allowedCapacity",
        ),
        (
            "plan-zone",
            json!({"capacity": null, "capacityPlan": {"rungs": [{"spot": {}, "zones": ["us-east5-b", "us-central2-b"]}]}}),
            "allowedZones",
        ),
    ];
    for (name, extra, field) in cases {
        let message = refused(team_a, &slice(name, extra)).await;
        assert!(message.contains(&denied_by(tenant, field)), "{name}: {message}");
        assert!(message.contains("ValidatingAdmissionPolicy"), "{name}: {message}");
        let names = match name {
            "plan-kind" => "TpuSlice capacityPlan rung onDemand is not allowed",
            "plan-zone" => "TpuSlice capacityPlan zone us-central2-b is not allowed",
            _ => "",
        };
        assert!(message.contains(names), "{name}: {message}");
    }
}

/// A batch's service account and a pipeline's capacity are refused too; nothing reached the cloud.
async fn batch_and_pipeline_with_forbidden_fields_are_refused_at_admission(
    env: &TestEnv,
    team_a: &Tenant,
    tenant: &str,
) {
    let batch: PreprocessBatch = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "PreprocessBatch",
        "metadata": {"name": "batch-sa"},
        "spec": {"region": "us-east5", "pyspark": {"mainPythonFileUri": "gs://b/s.py"},
                 "execution": {"serviceAccount": "etl@prod-proj.iam.gserviceaccount.com"}}
    }))
    .unwrap();
    let message = refused(team_a, &batch).await;
    assert!(
        message.contains(&denied_by(tenant, "allowedServiceAccounts")),
        "{message}"
    );
    let pipeline: TrainingPipeline = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TrainingPipeline",
        "metadata": {"name": "vertex-on-demand"},
        "spec": {"region": "us-east5", "artifacts": {"modelDir": "gs://team-data/models/a/"},
                 "training": {"vertex": {"machineType": "ct6e-standard-4t", "tpuTopology": "2x2",
                                          "container": {"image": "us-docker.pkg.dev/p/r/t:1"}}}}
    }))
    .unwrap();
    let message = refused(team_a, &pipeline).await;
    assert!(
        message.contains(&denied_by(tenant, "allowedCapacity")),
        "{message}"
    );
    assert_eq!(
        env.gcp.call_count("tpu", "nodes.create"),
        0,
        "nothing refused reached the cloud"
    );
}

/// Allowed: a slice converges in the default project, and the policy shows its chips.
async fn allowed_slice_converges_and_its_chips_show_in_the_policy(
    env: &TestEnv,
    team_a: &Tenant,
    tenant: &str,
) {
    team_a.create(&slice("ok", json!({}))).await;
    env.wait_for::<TpuSlice, _>("ok", "Ready", STEP, |s| {
        s.status.as_ref().is_some_and(|st| {
            find_condition(&st.conditions, types::READY).is_some_and(|c| c.status == "True")
        })
    })
    .await;
    let p = wait_policy(env, tenant, |s| s.chips == 8).await;
    let status = p.status.unwrap();
    assert_eq!((status.selected_namespaces, status.refused), (1, 0), "{status:?}");
    assert_eq!(status.namespaces[0].name, env.ns);
}

/// Over the chip quota: admission cannot know usage, the controller refuses with no cloud call.
async fn over_the_chip_quota_the_controller_refuses_with_no_cloud_call(
    env: &TestEnv,
    team_a: &Tenant,
    tenant: &str,
) {
    team_a.create(&slice("over", json!({}))).await;
    let over: TpuSlice = env
        .wait_for("over", "PolicyDenied", STEP, |s: &TpuSlice| {
            s.status.as_ref().is_some_and(|st| {
                find_condition(&st.conditions, types::STALLED).is_some_and(|c| c.reason == "PolicyDenied")
            })
        })
        .await;
    let over_status = over.status.unwrap();
    let message = &find_condition(&over_status.conditions, types::STALLED)
        .unwrap()
        .message;
    assert!(message.contains(&denied_by(tenant, "maxChips")), "{message}");
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 1);
    wait_policy(env, tenant, |s| s.refused == 1).await;
}

/// Chips go back when the slice goes; the other team's policy never selected this namespace.
async fn chips_go_back_and_the_other_teams_policy_never_selects_this_namespace(
    env: &TestEnv,
    team_a: &Tenant,
    tenant: &str,
) {
    team_a
        .api::<TpuSlice>()
        .delete("ok", &DeleteParams::default())
        .await
        .unwrap();
    wait_policy(env, tenant, |s| s.chips == 0 || s.chips == 8 && s.refused == 0).await;
    let ns = &env.ns;
    let other = Api::<TpuPolicy>::all(env.client.clone())
        .get(&format!("other-{ns}"))
        .await
        .unwrap();
    assert!(
        other
            .status
            .is_none_or(|s| s.namespaces.iter().all(|n| n.name != *ns))
    );
}

/// Team B's namespace: its policy applies there, team A's does not (team B's tenant writes).
async fn team_b_gets_its_own_policy_and_not_team_as(env: &TestEnv, team_b: &Tenant) {
    let in_b = |name: &str, extra: serde_json::Value| {
        let mut s = slice(name, extra);
        s.metadata.namespace = Some(team_b.ns.clone());
        s
    };
    let b_api: Api<TpuSlice> = team_b.api();
    let message = match b_api
        .create(&PostParams::default(), &in_b("b-east", json!({})))
        .await
    {
        Err(kube::Error::Api(e)) => e.message,
        other => panic!("team B's slice in us-east5-b was not refused: {other:?}"),
    };
    let ns = &env.ns;
    assert!(
        message.contains(&format!("denied by TpuPolicy other-{ns}, spec.allowedZones:")),
        "{message}"
    );
    let allowed_for_b = in_b(
        "b-central",
        json!({"zone": "us-central2-b", "capacity": {"onDemand": {}}}),
    );
    b_api
        .create(&PostParams::default(), &allowed_for_b)
        .await
        .expect("team A's policy does not apply in team B's namespace");
    b_api.delete("b-central", &DeleteParams::default()).await.unwrap();
}

async fn wait_policy(
    env: &TestEnv,
    name: &str,
    pred: impl Fn(&tpu_operator_api::TpuPolicyStatus) -> bool,
) -> TpuPolicy {
    let api = Api::<TpuPolicy>::all(env.client.clone());
    for _ in 0..600 {
        let p = api.get(name).await.unwrap();
        if p.status.as_ref().is_some_and(&pred) {
            return p;
        }
        env.gcp.clock().advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "TpuPolicy {name} never reached the expected status: {:?}",
        api.get(name).await.unwrap().status
    );
}
