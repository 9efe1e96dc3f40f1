//! Fixtures the tenancy suites share (guardrails, the red-team files, refused calls): who acts as
//! the tenant, a spot v6e-8 TpuSlice, a TpuPolicy selecting the test's namespace, the three
//! controllers, and reading a `Stalled` condition. Each of those suites uses part of it.
#![allow(dead_code)]

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::json;
use test_kit::{Tenant, TestEnv};
use tpu_operator_api::{
    conditions::{find_condition, types},
    tpu_policy::TpuPolicy,
    tpu_slice::TpuSlice,
};
use tpu_operator_controller::{
    Context,
    kinds::{preprocess_batch, tpu_slice, training_pipeline},
    never_shutdown,
};

/// Who acts in a red-team test: the test namespace's `edit` ServiceAccount on the real API
/// server (the chart's aggregated roles installed), the admin client on kube-emulator (which says
/// so). Setup a platform team does (policies, namespaces, faults) stays with `env.client`.
pub async fn as_tenant(env: &TestEnv) -> Tenant {
    env.tenant(test_tools::helm).await
}

/// [`as_tenant`] of another namespace (team B), which must exist.
pub async fn as_tenant_in(env: &TestEnv, ns: &str) -> Tenant {
    env.tenant_in(ns, test_tools::helm).await
}

/// A spot v6e-8 TpuSlice in us-east5-b, with `extra` spec fields set over it.
pub fn slice(name: &str, extra: serde_json::Value) -> TpuSlice {
    let mut spec = json!({
        "zone": "us-east5-b",
        "acceleratorType": "v6e-8",
        "runtimeVersion": "v2-alpha-tpuv6e",
        "capacity": {"spot": {}},
    });
    for (k, v) in extra.as_object().expect("extra spec fields as an object") {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("TpuSlice fixture")
}

/// `rules` with `allowedBuckets: ["*"]` unless they set `allowedBuckets` (`null` included) or
/// `googleServiceAccount`.
pub fn every_bucket_unless_scoped(mut rules: serde_json::Value) -> serde_json::Value {
    if rules.get("allowedBuckets").is_none() && rules.get("googleServiceAccount").is_none() {
        rules["allowedBuckets"] = json!(["*"]);
    }
    rules
}

/// The name of the policy [`policy`] makes for `namespace` (policies are cluster-scoped: named
/// after the namespace, tests sharing a real API server never see each other's).
pub fn policy_name(namespace: &str) -> String {
    format!("pol-{namespace}")
}

/// A TpuPolicy with `rules`, selecting `namespace` only. Rules that give the namespace no
/// Google identity and no bucket list get `allowedBuckets: ["*"]`: these suites name buckets
/// freely and were written when that was the default (issue 47 made a governed namespace name
/// either); `"allowedBuckets": null` keeps the field absent.
pub fn policy(namespace: &str, rules: serde_json::Value) -> TpuPolicy {
    let mut spec = every_bucket_unless_scoped(rules);
    spec["namespaces"] = json!([namespace]);
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuPolicy",
        "metadata": {"name": policy_name(namespace)},
        "spec": spec,
    }))
    .expect("policy")
}

/// Where refusal messages name the field `f` of the policy of `namespace`.
pub fn denied_by(namespace: &str, f: &str) -> String {
    format!("denied by TpuPolicy {}, spec.{f}:", policy_name(namespace))
}

pub async fn create_policy(client: &kube::Client, p: &TpuPolicy) {
    kube::Api::<TpuPolicy>::all(client.clone())
        .create(&Default::default(), p)
        .await
        .expect("create the TpuPolicy");
}

/// The three controllers on `ctx`, until the env is dropped.
pub fn spawn_controllers(env: &mut TestEnv, ctx: &Arc<Context>) {
    env.spawn(tpu_slice::run(ctx.clone(), never_shutdown()));
    env.spawn(preprocess_batch::run(ctx.clone(), never_shutdown()));
    env.spawn(training_pipeline::run(ctx.clone(), never_shutdown()));
}

/// Creates the test namespace's policy (if any), then starts the three controllers on a fresh
/// context, as the operator builds it, watching the policies.
pub async fn start(env: &mut TestEnv, rules: Option<serde_json::Value>) -> Arc<Context> {
    if let Some(rules) = rules {
        create_policy(&env.client, &policy(&env.ns, rules)).await;
    }
    let ctx = Arc::new(env.context().await);
    spawn_controllers(env, &ctx);
    ctx
}

/// `(reason, message)` of a `Stalled=True` condition.
pub fn stalled(conditions: &[Condition]) -> Option<(String, String)> {
    find_condition(conditions, types::STALLED)
        .filter(|c| c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

pub fn slice_stalled(s: &TpuSlice) -> Option<(String, String)> {
    stalled(&s.status.as_ref()?.conditions)
}

pub fn is_ready(s: &TpuSlice) -> bool {
    s.status
        .as_ref()
        .and_then(|st| find_condition(&st.conditions, types::READY))
        .is_some_and(|c| c.status == "True")
}
