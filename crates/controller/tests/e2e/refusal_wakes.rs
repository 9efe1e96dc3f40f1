//! A refused cloud call's fix reaches every object it stalled within seconds, through the real
//! path (CR → controllers → Google's clients → gcp-emulator → status), and a credentials failure
//! is reported as one:
//! * no token (GKE's metadata server answers 403 while the Workload Identity binding is missing)
//!   is `CredentialsUnavailable`, naming the binding, not `PermissionDenied`; once the binding is
//!   fixed every stalled object runs its next pass and reaches Ready;
//! * a missing role, once granted, is seen by one probing object within its interval (one call
//!   per interval, not one per object), and every stalled object runs its next pass.
//!
//! Before, both kinds of objects waited out the 300 s retry of a permanent error (unscaled real
//! time here too), and a credentials failure read `PermissionDenied`.
//!
//! The delays are real time, measured with the harness's fast polls and the production canary
//! interval and credentials probe (8 s and 5 s, not scaled); printed for the record.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use gcp_emulator::{Code, Fault};
use google_cloud_auth::{
    credentials::{CacheableResource, Credentials, CredentialsProvider},
    errors::CredentialsError,
};
use http::{Extensions, HeaderMap, HeaderValue};
use test_kit::{ContextSpec, Polls, TestEnv};
use tpu_operator_api::{preprocess_batch::PreprocessBatch, tpu_slice::TpuSlice};
use tpu_operator_controller::{
    Context, governance::tenancy::WithoutPolicy, runtime::stalled_on::CANARY_INTERVAL,
};
use tpu_operator_gcp::{CredentialsMode, CustomCredentials};

use crate::tenant::{self, is_ready, slice_stalled, stalled};

/// The two namespaces the stalled objects live in, and how many in each.
const SPREAD: [(&str, usize); 2] = [("team-a", 3), ("team-b", 2)];
/// Emulated time per poll, so nodes provision while the test watches.
const STEP: Duration = Duration::from_secs(5);
/// How long a stalled object may take to run again after the fix: the bound.
const PROMPTLY: Duration = Duration::from_secs(10);

/// A token source as GKE's metadata server is to the operator: it refuses (403, permanently)
/// while the Workload Identity binding is missing, and hands out tokens once it exists.
#[derive(Debug)]
struct MetadataServer {
    bound: Arc<AtomicBool>,
}

impl CredentialsProvider for MetadataServer {
    async fn headers(&self, _: Extensions) -> Result<CacheableResource<HeaderMap>, CredentialsError> {
        if !self.bound.load(Ordering::SeqCst) {
            return Err(CredentialsError::from_msg(
                false,
                "the metadata server answered 403: the Kubernetes service account is not bound to a \
                 Google service account",
            ));
        }
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer wi-token"),
        );
        Ok(CacheableResource::New {
            entity_tag: Default::default(),
            data: headers,
        })
    }

    async fn universe_domain(&self) -> Option<String> {
        None
    }
}

/// Every object's (namespace, name).
fn objects() -> Vec<(String, String)> {
    SPREAD
        .iter()
        .flat_map(|(ns, n)| (0..*n).map(move |i| (ns.to_string(), format!("{ns}-{i}"))))
        .collect()
}

/// The controllers' context over every namespace (each test has its own kube-emulator), its GCP
/// clients sending `credentials` (`None`: anonymous, as every other suite).
async fn context(env: &TestEnv, credentials: Option<CredentialsMode>) -> Option<Arc<Context>> {
    if env.kube().is_none() {
        eprintln!("skipped: needs two namespaces watched by one operator, set up on kube-emulator only");
        return None;
    }
    let spec = ContextSpec {
        cluster_id: "test-cluster".into(),
        default_project: "demo-project".into(),
        namespace: None,
        concurrency: 8,
        polls: Polls::fast(),
        tenancy: Some(WithoutPolicy::Allow),
    };
    let ctx = match credentials {
        Some(credentials) => spec.build_credentialed(&env.client, &env.gcp, credentials).await,
        None => spec.build(&env.client, &env.gcp).await,
    };
    Some(Arc::new(ctx.expect("controller context")))
}

async fn create_namespaces(env: &TestEnv) {
    let namespaces = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client.clone());
    for (ns, _) in SPREAD {
        let namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
        namespaces
            .create(&Default::default(), &namespace)
            .await
            .unwrap_or_else(|err| panic!("create namespace {ns}: {err}"));
    }
}

async fn create_all(env: &TestEnv) {
    create_namespaces(env).await;
    for (ns, name) in objects() {
        test_kit::create_in(&env.client, &ns, &tenant::slice(&name, serde_json::json!({}))).await;
    }
}

async fn get(env: &TestEnv, ns: &str, name: &str) -> TpuSlice {
    kube::Api::<TpuSlice>::namespaced(env.client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|err| panic!("get {ns}/{name}: {err}"))
}

/// Waits (real time, fast polls, the emulated clock moving) until every object is stalled with
/// `reason`; returns their messages.
async fn all_stalled(env: &TestEnv, reason: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut messages = Vec::new();
        for (ns, name) in objects() {
            match slice_stalled(&get(env, &ns, &name).await) {
                Some((r, message)) if r == reason => messages.push(message),
                other => assert!(
                    Instant::now() < deadline,
                    "{ns}/{name} not stalled with {reason}: {other:?}"
                ),
            }
        }
        if messages.len() == objects().len() {
            return messages;
        }
        env.gcp.clock().advance(STEP);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// After a fix at `fixed`: how long until the first call Google did not refuse, and, per object, until
/// its next pass (its status no longer stalled) and until it is Ready.
struct Recovery {
    first_call: Duration,
    next_pass: Vec<(String, Duration)>,
    ready: Vec<(String, Duration)>,
}

/// Calls of `method` (any, when `None`) Google did not refuse so far (a 404 for a node not
/// created yet is an answer: the call got through).
fn answered(env: &TestEnv, method: Option<&str>) -> usize {
    env.gcp
        .calls()
        .iter()
        .filter(|c| !matches!(c.status, 401 | 403) && method.is_none_or(|m| c.method == m))
        .count()
}

/// `method`: the call that was refused (`None`: every call was).
async fn recovery(env: &TestEnv, fixed: Instant, method: Option<&str>) -> Recovery {
    let answered_before = answered(env, method);
    let deadline = fixed + Duration::from_secs(60);
    let mut first_call = None;
    let mut next_pass = Vec::new();
    let mut ready = Vec::new();
    while ready.len() < objects().len() {
        assert!(
            Instant::now() < deadline,
            "not recovered 60 s after the fix: passes {next_pass:?}, ready {ready:?}, calls {:?}",
            env.gcp.call_counts()
        );
        if first_call.is_none() && answered(env, method) > answered_before {
            first_call = Some(fixed.elapsed());
        }
        for (ns, name) in objects() {
            let key = format!("{ns}/{name}");
            let s = get(env, &ns, &name).await;
            if slice_stalled(&s).is_none() && !next_pass.iter().any(|(k, _)| *k == key) {
                next_pass.push((key.clone(), fixed.elapsed()));
            }
            if is_ready(&s) && !ready.iter().any(|(k, _)| *k == key) {
                ready.push((key, fixed.elapsed()));
            }
        }
        env.gcp.clock().advance(STEP);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Recovery {
        first_call: first_call.expect("a call answered before every object got Ready"),
        next_pass,
        ready,
    }
}

/// Prints what `fix` brought and asserts the first call and every stalled object's next pass
/// came within [`PROMPTLY`] of it.
fn assert_prompt(fix: &str, r: &Recovery) {
    eprintln!(
        "{fix}: first call answered after {:?}; next passes {:?}; Ready {:?}",
        r.first_call, r.next_pass, r.ready
    );
    assert!(
        r.first_call <= PROMPTLY,
        "first call {:?} after the fix",
        r.first_call
    );
    assert!(
        slowest(&r.next_pass) <= PROMPTLY,
        "every stalled object runs again within {PROMPTLY:?}: {:?}",
        r.next_pass
    );
}

fn slowest(times: &[(String, Duration)]) -> Duration {
    times.iter().map(|(_, t)| *t).max().unwrap_or_default()
}

#[tokio::test]
async fn a_fixed_workload_identity_binding_wakes_every_object_it_stalled() {
    let mut env = TestEnv::start().await;
    let bound = Arc::new(AtomicBool::new(false));
    let source = bound.clone();
    let metadata_server = CustomCredentials(Arc::new(move || {
        Ok(Credentials::from(MetadataServer {
            bound: source.clone(),
        }))
    }));
    let Some(ctx) = context(&env, Some(CredentialsMode::Custom(metadata_server))).await else {
        return;
    };
    tenant::spawn_controllers(&mut env, &ctx);
    create_all(&env).await;

    for message in all_stalled(&env, "CredentialsUnavailable").await {
        for part in [
            "roles/iam.workloadIdentityUser",
            "iam.gke.io/gcp-service-account",
            "metadata server answered 403",
        ] {
            assert!(
                message.contains(part),
                "names the binding to fix ({part}): {message}"
            );
        }
    }
    assert!(
        env.gcp.calls().is_empty(),
        "no token, no call: {:?}",
        env.gcp.call_counts()
    );
    // Every object parked on its backoff (or, for one, the canary's interval).
    tokio::time::sleep(Duration::from_secs(1)).await;

    bound.store(true, Ordering::SeqCst);
    let fixed = Instant::now();
    assert_prompt("binding fixed", &recovery(&env, fixed, None).await);
}

#[tokio::test]
async fn a_granted_role_wakes_every_object_it_stalled_after_one_probe_per_interval() {
    let mut env = TestEnv::start().await;
    let Some(ctx) = context(&env, None).await else {
        return;
    };
    // The operator's service account lacks tpu.nodes.get (roles/tpu.admin) on the project.
    env.gcp
        .inject(Fault::FailCalls {
            service: "tpu".into(),
            method: "nodes.get".into(),
            count: 100_000,
            code: Code::PermissionDenied,
            message: None,
        })
        .unwrap();
    tenant::spawn_controllers(&mut env, &ctx);
    create_all(&env).await;
    for message in all_stalled(&env, "PermissionDenied").await {
        assert!(
            message.contains("tpu.nodes.get") && message.contains("roles/tpu.admin"),
            "{message}"
        );
    }

    // While the role is missing, one object probes it for all five: count the refused reads
    // over one canary interval and a half.
    let refused = |env: &TestEnv| {
        env.gcp
            .calls()
            .iter()
            .filter(|c| c.method == "nodes.get" && c.status == 403)
            .count()
    };
    let before = refused(&env);
    tokio::time::sleep(CANARY_INTERVAL + CANARY_INTERVAL / 2).await;
    let probes = refused(&env) - before;
    eprintln!(
        "role missing: {probes} refused nodes.get in {:?} for {} stalled objects",
        CANARY_INTERVAL + CANARY_INTERVAL / 2,
        objects().len()
    );
    assert!(
        (1..=2).contains(&probes),
        "one probe per {CANARY_INTERVAL:?} for the blocker, not one per object: {probes}"
    );
    // The metrics say how many objects wait on a fix.
    let metrics = &ctx.metrics;
    assert_eq!(metrics.stalled_on_refusal.get(), objects().len() as i64);

    env.gcp.clear_faults();
    let granted = Instant::now();
    // The probe retries every CANARY_INTERVAL: the grant is seen within one, plus a pass.
    assert_prompt("role granted", &recovery(&env, granted, Some("nodes.get")).await);
    // ... and that the others were woken by the probe's pass, not by their own backoff.
    let woken = |why| {
        let labels = tpu_operator_controller::runtime::metrics::WakeLabels { why };
        metrics.stall_wakes.get_or_create(&labels).get()
    };
    assert_eq!(woken("canary passed"), objects().len() as u64 - 1);
    assert_eq!(metrics.stalled_on_refusal.get(), 0);
}

const OPERATOR: &str = "tpu-operator@platform-proj.iam.gserviceaccount.com";

/// Team `ns`'s Google service account, the identity its namespace's policy gives it.
fn team_account(ns: &str) -> String {
    format!("{ns}@{ns}-proj.iam.gserviceaccount.com")
}

/// A PreprocessBatch of team `ns` that reads `gs://{ns}-data/{input}/`.
fn team_batch(ns: &str, input: &str) -> PreprocessBatch {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "PreprocessBatch",
        "metadata": {"name": input},
        "spec": {"project": format!("{ns}-proj"), "region": "us-east5",
                 "pyspark": {"mainPythonFileUri": format!("gs://{ns}-data/s.py")},
                 "inputs": [format!("gs://{ns}-data/{input}/")]}
    }))
    .expect("PreprocessBatch fixture")
}

/// The reason a batch is stalled with, if it is.
async fn batch_stalled(env: &TestEnv, ns: &str, name: &str) -> Option<String> {
    let b = kube::Api::<PreprocessBatch>::namespaced(env.client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|err| panic!("get {ns}/{name}: {err}"));
    stalled(&b.status?.conditions).map(|(reason, _)| reason)
}

/// Each namespace reads its own bucket as its own account (docs/policy.md), and neither account
/// has a role on its bucket yet. Granting team-a's must re-queue team-a's stalled objects within
/// 10 s, and none of team-b's: team-b's objects stall on another identity's refusal.
#[tokio::test]
async fn a_grant_to_one_team_s_account_wakes_that_team_s_objects_only() {
    let mut env = TestEnv::start().await;
    let Some(ctx) = context(&env, None).await else {
        return;
    };
    let gcp = &env.gcp;
    gcp.set_default_principal(OPERATOR);
    let [(team_a, _), (team_b, _)] = SPREAD;
    let inputs = |ns: &str| [format!("{ns}-input-0"), format!("{ns}-input-1")];
    for ns in [team_a, team_b] {
        gcp.grant_token_creator(&team_account(ns), &format!("serviceAccount:{OPERATOR}"));
        // A binding to someone else makes the bucket IAM-checked: the team's account is refused.
        gcp.grant_bucket(
            &format!("{ns}-data"),
            "roles/storage.objectViewer",
            "serviceAccount:someone-else@elsewhere.iam.gserviceaccount.com",
        )
        .unwrap();
        for input in inputs(ns) {
            gcp.put_object(
                &format!("{ns}-data"),
                &format!("{input}/part-0"),
                "x",
                "text/plain",
            );
        }
    }
    create_namespaces(&env).await;
    for ns in [team_a, team_b] {
        let rules = serde_json::json!({"googleServiceAccount": team_account(ns)});
        tenant::create_policy(&env.client, &tenant::policy(ns, rules)).await;
    }
    tenant::spawn_controllers(&mut env, &ctx);
    for ns in [team_a, team_b] {
        for input in inputs(ns) {
            test_kit::create_in(&env.client, ns, &team_batch(ns, &input)).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for ns in [team_a, team_b] {
        for input in inputs(ns) {
            while batch_stalled(&env, ns, &input).await.as_deref() != Some("PermissionDenied") {
                assert!(
                    Instant::now() < deadline,
                    "{ns}/{input} not stalled on its refused read"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    let calls_before = env.gcp.calls().len();
    env.gcp
        .grant_bucket(
            &format!("{team_a}-data"),
            "roles/storage.objectViewer",
            &format!("serviceAccount:{}", team_account(team_a)),
        )
        .unwrap();
    let granted = Instant::now();
    let mut next_pass = Vec::new();
    while next_pass.len() < 2 {
        assert!(
            granted.elapsed() <= PROMPTLY,
            "team-a's objects did not run again within {PROMPTLY:?}: {next_pass:?}"
        );
        for input in inputs(team_a) {
            if batch_stalled(&env, team_a, &input).await.is_none()
                && !next_pass.iter().any(|(i, _)| *i == input)
            {
                next_pass.push((input, granted.elapsed()));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Team-b's objects over the same 10 s: stalled still, and at most one of them (its own
    // blocker's probe) made a call; a wake by team-a's grant would have run both.
    tokio::time::sleep(PROMPTLY.saturating_sub(granted.elapsed())).await;
    let calls = env.gcp.calls();
    let calls_of = |input: &str| {
        calls[calls_before..]
            .iter()
            .filter(|c| c.path.contains(input) || c.query.contains(input))
            .count()
    };
    let team_b_calls: Vec<(String, usize)> =
        inputs(team_b).iter().map(|i| (i.clone(), calls_of(i))).collect();
    eprintln!(
        "team-a's role granted: its objects ran again after {next_pass:?}; team-b's calls in the next \
         {PROMPTLY:?}: {team_b_calls:?}"
    );
    assert!(
        team_b_calls.iter().filter(|(_, n)| *n > 0).count() <= 1,
        "team-a's grant ran team-b's objects: {team_b_calls:?}"
    );
    for input in inputs(team_b) {
        assert_eq!(
            batch_stalled(&env, team_b, &input).await.as_deref(),
            Some("PermissionDenied"),
            "{input}"
        );
    }
}
