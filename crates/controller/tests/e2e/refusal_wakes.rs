//! A refused cloud call's fix reaches every object it stalled, through the real path (CR →
//! controllers → Google's clients → gcp-emulator → status), and a credentials failure is
//! reported as one:
//! * no token (GKE's metadata server answers 403 while the Workload Identity binding is missing)
//!   is `CredentialsUnavailable`, naming the binding, not `PermissionDenied`; once the binding is
//!   fixed every stalled object runs its next pass and reaches Ready;
//! * a missing role is probed by one object for all of them, at most once per
//!   [`CANARY_INTERVAL`] (not once per object); once granted, every stalled object runs its
//!   next pass.
//!
//! Before, both kinds of objects waited out the retry of a permanent error
//! ([`PERMANENT_RETRY`], 5 minutes of real time, here too).
//!
//! What is judged is the wake, not how fast the machine is: an object refused by Google retries
//! no sooner than [`PERMANENT_RETRY`] after its failed pass, and every failed pass here came
//! after the test created its objects. So an object that runs again before `PERMANENT_RETRY`
//! has passed since then was run by a wake (or is the canary probing), however long the machine
//! took; past that point a test fails, and before it only the suite's hang limit
//! ([`TestEnv::until`]) bounds a wait. The wakes are counted too (`tpu_operator_stall_wakes`). The
//! canary's probes are bounded by the real time they had (one per [`CANARY_INTERVAL`] at most),
//! which a busy machine only lengthens. The delays are printed for the record (production canary
//! interval and credentials probe, 8 s and 5 s, with the harness's fast polls: about 4–8 s).

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
use kube::ResourceExt;
use test_kit::{ContextSpec, Polls, TestEnv};
use tpu_operator_api::{preprocess_batch::PreprocessBatch, tpu_slice::TpuSlice};
use tpu_operator_controller::{
    Context,
    governance::tenancy::WithoutPolicy,
    reconcile::retry::PERMANENT_RETRY,
    runtime::{metrics::WakeLabels, stalled_on::CANARY_INTERVAL},
};
use tpu_operator_gcp::{CredentialsMode, CustomCredentials};

use crate::tenant::{self, is_ready, slice_stalled, stalled};

/// The two namespaces the stalled objects live in, and how many in each.
const SPREAD: [(&str, usize); 2] = [("team-a", 3), ("team-b", 2)];
/// Emulated time per poll, so nodes provision while the test watches.
const STEP: Duration = Duration::from_secs(5);

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

/// Every object, by "namespace/name", in one list (one request a poll, not one per object: the
/// waits poll every 10 ms, and on a busy machine their load slows the controllers they watch).
async fn all(env: &TestEnv) -> Vec<(String, TpuSlice)> {
    let slices = kube::Api::<TpuSlice>::all(env.client.clone())
        .list(&Default::default())
        .await
        .expect("list slices");
    let key = |s: &TpuSlice| format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
    let slices: Vec<_> = slices.items.into_iter().map(|s| (key(&s), s)).collect();
    assert_eq!(slices.len(), objects().len(), "{slices:#?}");
    slices
}

/// Waits (fast polls, the emulated clock moving) until every object is stalled with `reason`;
/// returns their messages.
async fn all_stalled(env: &TestEnv, reason: &str) -> Vec<String> {
    let what = format!("every object stalled with {reason}");
    env.until(&what, STEP, async || {
        let (mut messages, mut others) = (Vec::new(), Vec::new());
        for (key, s) in all(env).await {
            match slice_stalled(&s) {
                Some((r, message)) if r == reason => messages.push(message),
                other => others.push((key, other)),
            }
        }
        if others.is_empty() {
            Ok(messages)
        } else {
            Err(others)
        }
    })
    .await
}

/// Waits until `n` objects are registered as stalled on a refusal (the metric): each parked on
/// its backoff, one per blocker on the canary's interval. A fix from then on must wake them.
async fn parked(env: &TestEnv, ctx: &Context, n: usize) {
    env.until("every object parked on its refusal", Duration::ZERO, async || {
        let stalled = ctx.metrics.stalled_on_refusal.get();
        if stalled == n as i64 { Ok(()) } else { Err(stalled) }
    })
    .await
}

/// Fails once [`PERMANENT_RETRY`] has passed since `created` (before every object's first
/// pass): from then on an object's own retry could run it, so a pass no longer shows a wake.
/// Called after the reads it vouches for, so everything they saw happened before that point.
fn before_own_retry(created: Instant, what: &str) {
    assert!(
        created.elapsed() < PERMANENT_RETRY,
        "{what}: {PERMANENT_RETRY:?} after the objects were created, so no wake reached them \
         (their own retry of the refused call is due now)"
    );
}

/// How many objects were re-queued early because of `why` (`tpu_operator_stall_wakes`).
fn woken(ctx: &Context, why: &'static str) -> u64 {
    ctx.metrics.stall_wakes.get_or_create(&WakeLabels { why }).get()
}

/// After a fix at `fixed`: how long until the first call Google did not refuse, and, per object, until
/// its next pass (its status no longer stalled) and until it is Ready. For the record: what is
/// judged is that they came before any object's own retry ([`before_own_retry`]).
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

/// Waits until every object created at `created` is Ready after a fix at `fixed`, each having
/// run again before its own retry could ([`before_own_retry`]). `method`: the call that was
/// refused (`None`: every call was).
async fn recovery(env: &TestEnv, created: Instant, fixed: Instant, method: Option<&str>) -> Recovery {
    let answered_before = answered(env, method);
    // The call log is copied under the emulator's lock: it is read again only when the counts
    // say a call of `method` came (a copy every poll slowed the controllers on a busy machine).
    let counted = || {
        let counts = env.gcp.call_counts();
        let of_method = |key: &String| method.is_none_or(|m| key.ends_with(&format!(".{m}")));
        counts
            .iter()
            .filter(|(k, _)| of_method(k))
            .map(|(_, n)| n)
            .sum::<u64>()
    };
    let mut looked = counted();
    let mut first_call = None;
    let mut next_pass = Vec::new();
    let mut ready = Vec::new();
    env.until("every stalled object Ready after the fix", STEP, async || {
        if first_call.is_none() && counted() != looked {
            looked = counted();
            if answered(env, method) > answered_before {
                first_call = Some(fixed.elapsed());
            }
        }
        for (key, s) in all(env).await {
            if slice_stalled(&s).is_none() && !next_pass.iter().any(|(k, _)| *k == key) {
                next_pass.push((key.clone(), fixed.elapsed()));
            }
            if is_ready(&s) && !ready.iter().any(|(k, _)| *k == key) {
                ready.push((key, fixed.elapsed()));
            }
        }
        let seen = format!(
            "after the fix: first call {first_call:?}, next passes {next_pass:?}, Ready {ready:?}, calls {:?}",
            env.gcp.call_counts()
        );
        before_own_retry(created, &seen);
        if ready.len() == objects().len() { Ok(()) } else { Err(seen) }
    })
    .await;
    Recovery {
        first_call: first_call.expect("a call answered before every object got Ready"),
        next_pass,
        ready,
    }
}

fn report(fix: &str, r: &Recovery) {
    eprintln!(
        "{fix}: first call answered after {:?}; next passes {:?}; Ready {:?}",
        r.first_call, r.next_pass, r.ready
    );
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
    let created = Instant::now();
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
    parked(&env, &ctx, objects().len()).await;

    bound.store(true, Ordering::SeqCst);
    let fixed = Instant::now();
    report("binding fixed", &recovery(&env, created, fixed, None).await);
    // Each of the others was re-queued by a wake: the token source's recovery, or the probe's
    // pass.
    let wakes = woken(&ctx, "credentials recovered") + woken(&ctx, "canary passed");
    assert!(
        wakes >= objects().len() as u64 - 1,
        "{wakes} wakes for {} stalled objects",
        objects().len()
    );
    assert_eq!(ctx.metrics.stalled_on_refusal.get(), 0);
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
    let created = Instant::now();
    create_all(&env).await;
    for message in all_stalled(&env, "PermissionDenied").await {
        assert!(
            message.contains("tpu.nodes.get") && message.contains("roles/tpu.admin"),
            "{message}"
        );
    }
    // The metrics say how many objects wait on a fix.
    parked(&env, &ctx, objects().len()).await;

    // While the role is missing, one object probes it for all five, at most once per
    // CANARY_INTERVAL (each probe is the canary's retry, CANARY_INTERVAL after its last refusal):
    // over a window of real time (an interval and a half, longer on a busy machine, and until a
    // probe came) the refused reads number at most one more than the whole intervals the window
    // spans, and all read one object's node.
    let refused = |env: &TestEnv| -> Vec<String> {
        env.gcp
            .calls()
            .into_iter()
            .filter(|c| c.method == "nodes.get" && c.status == 403)
            .map(|c| c.path)
            .collect()
    };
    let window = Instant::now();
    let before = refused(&env).len();
    tokio::time::sleep(CANARY_INTERVAL + CANARY_INTERVAL / 2).await;
    env.until("the probe of the missing role", Duration::ZERO, async || {
        let probed = refused(&env).len() > before;
        before_own_retry(created, "no object probed the missing role");
        probed
    })
    .await;
    let elapsed = window.elapsed();
    let probes = refused(&env).split_off(before);
    let bound = 1 + (elapsed.as_secs_f64() / CANARY_INTERVAL.as_secs_f64()).floor() as usize;
    let probers: std::collections::BTreeSet<&String> = probes.iter().collect();
    eprintln!(
        "role missing: {} refused nodes.get in {elapsed:?} (bound {bound}) for {} stalled objects, \
         by {} of them",
        probes.len(),
        objects().len(),
        probers.len()
    );
    assert!(
        probes.len() <= bound,
        "at most one probe per {CANARY_INTERVAL:?} for the blocker, not one per object: {} in \
         {elapsed:?}: {probes:?}",
        probes.len()
    );
    assert_eq!(probers.len(), 1, "one object probes for all: {probes:?}");
    assert_eq!(ctx.metrics.stalled_on_refusal.get(), objects().len() as i64);

    env.gcp.clear_faults();
    let granted = Instant::now();
    // The probe retries every CANARY_INTERVAL: it sees the grant, and its pass wakes the others.
    report(
        "role granted",
        &recovery(&env, created, granted, Some("nodes.get")).await,
    );
    // ... and that the others were woken by the probe's pass, not by their own backoff.
    assert_eq!(woken(&ctx, "canary passed"), objects().len() as u64 - 1);
    assert_eq!(ctx.metrics.stalled_on_refusal.get(), 0);
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

/// Team `ns`'s two batches, each reading its own input.
fn team_inputs(ns: &str) -> [String; 2] {
    [format!("{ns}-input-0"), format!("{ns}-input-1")]
}

/// Waits, the clock still, until every batch of `teams` is stalled on its refused read.
async fn batches_stalled(env: &TestEnv, teams: [&str; 2]) {
    env.until(
        "every batch stalled on its refused read",
        Duration::ZERO,
        async || {
            let mut others = Vec::new();
            for ns in teams {
                for input in team_inputs(ns) {
                    let reason = batch_stalled(env, ns, &input).await;
                    if reason.as_deref() != Some("PermissionDenied") {
                        others.push((format!("{ns}/{input}"), reason));
                    }
                }
            }
            if others.is_empty() { Ok(()) } else { Err(others) }
        },
    )
    .await
}

/// Team `ns`'s batches, until its own probe has looked again since call `since` (within its
/// interval): stalled still, and only that one made a call (a wake would have run both).
/// Returns their calls since then.
async fn left_stalled(env: &TestEnv, ns: &str, since: usize, created: Instant) -> Vec<(usize, String)> {
    let calls = || {
        let calls = env.gcp.calls();
        let of = |input: &str| {
            calls[since..]
                .iter()
                .filter(|c| c.path.contains(input) || c.query.contains(input))
                .count()
        };
        team_inputs(ns).map(|i| (of(&i), i)).to_vec()
    };
    let what = format!("{ns}'s probe");
    env.until(&what, Duration::ZERO, async || {
        let probed = calls().iter().any(|(n, _)| *n > 0);
        before_own_retry(created, &format!("{ns}'s objects made no call"));
        probed
    })
    .await;
    let calls = calls();
    assert!(
        calls.iter().filter(|(n, _)| *n > 0).count() <= 1,
        "{ns}'s objects ran: {calls:?}"
    );
    for input in team_inputs(ns) {
        let reason = batch_stalled(env, ns, &input).await;
        assert_eq!(reason.as_deref(), Some("PermissionDenied"), "{input}");
    }
    calls
}

/// Each namespace reads its own bucket as its own account (docs/policy.md), and neither account
/// has a role on its bucket yet. Granting team-a's must re-queue team-a's stalled objects (before
/// their own retry could: [`before_own_retry`]), and none of team-b's: team-b's objects stall on
/// another identity's refusal.
#[tokio::test]
async fn a_grant_to_one_team_s_account_wakes_that_team_s_objects_only() {
    let mut env = TestEnv::start().await;
    let Some(ctx) = context(&env, None).await else {
        return;
    };
    let gcp = &env.gcp;
    gcp.set_default_principal(OPERATOR);
    let [(team_a, _), (team_b, _)] = SPREAD;
    for ns in [team_a, team_b] {
        gcp.grant_token_creator(&team_account(ns), &format!("serviceAccount:{OPERATOR}"));
        // A binding to someone else makes the bucket IAM-checked: the team's account is refused.
        gcp.grant_bucket(
            &format!("{ns}-data"),
            "roles/storage.objectViewer",
            "serviceAccount:someone-else@elsewhere.iam.gserviceaccount.com",
        )
        .unwrap();
        for input in team_inputs(ns) {
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
    let created = Instant::now();
    for ns in [team_a, team_b] {
        for input in team_inputs(ns) {
            test_kit::create_in(&env.client, ns, &team_batch(ns, &input)).await;
        }
    }
    batches_stalled(&env, [team_a, team_b]).await;
    parked(&env, &ctx, 4).await;

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
    env.until("team-a's objects run again", Duration::ZERO, async || {
        for input in team_inputs(team_a) {
            if batch_stalled(&env, team_a, &input).await.is_none()
                && !next_pass.iter().any(|(i, _)| *i == input)
            {
                next_pass.push((input, granted.elapsed()));
            }
        }
        let seen = format!("team-a's objects that ran again: {next_pass:?}");
        before_own_retry(created, &seen);
        if next_pass.len() == 2 { Ok(()) } else { Err(seen) }
    })
    .await;
    // One wake, of team-a's other object, by its probe's pass; one of team-b's too would count 3.
    assert_eq!(woken(&ctx, "canary passed"), 1, "team-a's waiter only");
    // Team-b's objects stay stalled: a wake by team-a's grant would have run both.
    let team_b_calls = left_stalled(&env, team_b, calls_before, created).await;
    eprintln!(
        "team-a's role granted: its objects ran again after {next_pass:?}; team-b's calls until its \
         probe, {:?} after the grant: {team_b_calls:?}",
        granted.elapsed()
    );
}
