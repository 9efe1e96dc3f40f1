//! What an object gated by Kueue waits for wakes it, on the real Kueue (v0.17.0) and the real
//! kube-apiserver (see kueue.rs for the harness).
//!
//! What is judged is the wake, not how fast the machine is: the polls that would otherwise run a
//! waiting object (`--poll-stable`, `--poll-capacity`, `--poll-watched`: 5 min, 30 s and 5 min in
//! a deployed operator) are set here to [`NO_POLL`], longer than any wait may take
//! ([`test_kit::wait_limit`]). So a waiting object that runs again at all was run by a wake (or,
//! after a failed call, by its backoff), however long the machine took; one that only a poll
//! would have run fails at the wait limit. Only `--poll-active` (2 s, a node provisioning) keeps
//! its deployed value. The delays are printed for the record (about 1–3 s on an idle machine).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::{
    Api,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
};
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{find_condition, types},
    tpu_slice::TpuSlice,
    training_pipeline::{TrainingPipeline, TrainingPipelinePhase as Phase},
};
use tpu_operator_controller::{
    kinds::{preprocess_batch, tpu_slice, training_pipeline},
    never_shutdown,
};

use super::{
    kueue::{
        STEP, apply, in_line, priority_class, queue, queued, ready, resource, slice, start_idle, visibility,
    },
    kueue_pipelines::vertex_pipeline,
};

/// The waiting objects' polls here: longer than any wait of this file may take.
const NO_POLL: Duration = Duration::from_secs(3600);

/// The env with Kueue's integration on, a deployed operator's active poll, no other polls
/// ([`NO_POLL`]), and the three controllers running; `None` where no real Kueue runs.
async fn start() -> Option<TestEnv> {
    let mut env = start_idle().await?;
    let config = &mut Arc::get_mut(&mut env.ctx)
        .expect("the context is not shared before the controllers start")
        .config;
    config.poll_active = Duration::from_secs(2);
    config.poll_capacity = NO_POLL;
    config.poll_stable = NO_POLL;
    config.poll_watched = NO_POLL;
    assert!(
        NO_POLL > test_kit::wait_limit(true),
        "a poll could end a wait here"
    );
    env.spawn(training_pipeline::run(env.ctx.clone(), never_shutdown()));
    env.spawn(preprocess_batch::run(env.ctx.clone(), never_shutdown()));
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    Some(env)
}

fn workloads(env: &TestEnv) -> Api<DynamicObject> {
    Api::namespaced_with(env.client.clone(), &env.ns, &resource("Workload", "workloads"))
}

fn admitted(tp: &TrainingPipeline) -> bool {
    tp.status
        .as_ref()
        .and_then(|s| s.kueue.as_ref())
        .is_some_and(|k| k.admitted)
}

/// The Vertex job's state in the emulated cloud (the pipeline's only one).
fn job_state(env: &TestEnv) -> Option<String> {
    let jobs = env.gcp.custom_jobs();
    jobs.first().and_then(|j| j["state"].as_str().map(str::to_string))
}

/// A suspended Vertex pipeline's job was cancelled within a second, but its Workload stayed
/// admitted until the pipeline's next stable poll (5 min): the job's end did not wake it. Now
/// the cancelling job is watched, and its end frees the quota.
#[tokio::test]
async fn a_suspended_pipelines_quota_is_free_once_its_job_has_ended() {
    let Some(env) = start().await else { return };
    let mut config = env.gcp.config();
    config.durations.job_run = Duration::from_secs(6 * 3600);
    env.gcp.set_config(config);
    queue(&env, "tpu", 8, None).await;
    env.create(&vertex_pipeline("train", Some("tpu"))).await;
    let training: TrainingPipeline = env
        .wait_for("train", "admitted and training", STEP, |tp| {
            admitted(tp) && tp.status.as_ref().is_some_and(|s| s.phase == Phase::Training)
        })
        .await;
    let workload = training.status.unwrap().kueue.unwrap().workload;
    // 4 chips run; an 8-chip slice waits behind them.
    env.create(&slice("next", "tpu", None)).await;
    env.wait_for::<TpuSlice, _>("next", "next queued", STEP, queued)
        .await;

    env.api::<TrainingPipeline>()
        .patch(
            "train",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .expect("suspend");
    let started = Instant::now();
    let mut ended = None;
    loop {
        if ended.is_none() && job_state(&env).as_deref() == Some("JOB_STATE_CANCELLED") {
            ended = Some(Instant::now());
        }
        if workloads(&env).get_opt(&workload).await.unwrap().is_none() {
            break;
        }
        assert!(
            started.elapsed() < test_kit::wait_limit(true),
            "the suspended pipeline kept its Workload; job {:?}",
            job_state(&env)
        );
        // The job cancels in 30 emulated seconds: 6 samples.
        env.gcp.clock().advance(Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ended = ended.expect("the job ended before its Workload went");
    let released = ended.elapsed();
    eprintln!(
        "Workload deleted {:.2} s after the suspended pipeline's job ended",
        released.as_secs_f64()
    );
}

fn stalled_on(s: &TpuSlice, reason: &str) -> bool {
    s.status.as_ref().is_some_and(|st| {
        find_condition(&st.conditions, types::STALLED)
            .is_some_and(|c| c.status == "True" && c.reason == reason)
    })
}

/// Polls `slice` every 100 ms (the cloud's clock 20 s on each time) until its node is created
/// and until it is Ready; returns both waits, from `since`.
async fn runs(env: &TestEnv, name: &str, since: Instant) -> (Duration, Duration) {
    let creates = env.gcp.call_count("tpu", "nodes.create");
    let mut created = None;
    loop {
        if created.is_none() && env.gcp.call_count("tpu", "nodes.create") > creates {
            created = Some(since.elapsed());
        }
        let s: TpuSlice = env.api().get(name).await.unwrap();
        if let (Some(created), true) = (created, ready(&s)) {
            return (created, since.elapsed());
        }
        assert!(
            since.elapsed() < test_kit::wait_limit(true),
            "{name} never ran: {:#?}",
            s.status
        );
        env.gcp.clock().advance(STEP);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A slice whose label names a WorkloadPriorityClass that does not exist stalls
/// (`PriorityClassNotFound`) and, before, looked again only at its stable poll (5 min): it was
/// not picked up within 60 s of the class being created. The class's creation now wakes it.
#[tokio::test]
async fn a_slice_waiting_for_its_priority_class_runs_once_the_class_exists() {
    let Some(env) = start().await else { return };
    queue(&env, "tpu", 8, None).await;
    let class = format!("late-{}", env.ns);
    env.create(&slice("late", "tpu", Some(&class))).await;
    env.wait_for::<TpuSlice, _>("late", "stalled on the missing class", STEP, |s| {
        stalled_on(s, "PriorityClassNotFound")
    })
    .await;
    // The echo of its own status write has run its pass: it now waits.
    tokio::time::sleep(Duration::from_secs(3)).await;
    priority_class(&env, &class, 100).await;
    let (created, ready) = runs(&env, "late", Instant::now()).await;
    eprintln!(
        "node created {:.2} s, Ready {:.2} s after its priority class was created",
        created.as_secs_f64(),
        ready.as_secs_f64()
    );
}

/// A slice in a LocalQueue that does not exist yet waits (its Workload is pending: "LocalQueue
/// later doesn't exist"); the queue's creation admits it, and that wakes the slice.
#[tokio::test]
async fn a_slice_waiting_for_its_local_queue_runs_once_the_queue_exists() {
    let Some(env) = start().await else { return };
    let cluster_queue = queue(&env, "tpu", 8, None).await;
    env.create(&slice("early", "later", None)).await;
    env.wait_for::<TpuSlice, _>("early", "waiting for its queue", STEP, |s| {
        queued(s)
            && s.status
                .as_ref()
                .and_then(|st| st.message.as_deref())
                .is_some_and(|m| m.contains("doesn't exist"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let body = json!({"metadata": {"name": "later"}, "spec": {"clusterQueue": cluster_queue}});
    apply(&env, "LocalQueue", "localqueues", Some(&env.ns), body).await;
    let (created, ready) = runs(&env, "early", Instant::now()).await;
    eprintln!(
        "node created {:.2} s, Ready {:.2} s after its LocalQueue was created",
        created.as_secs_f64(),
        ready.as_secs_f64()
    );
}

/// Kueue down as the API server sees it for this test's namespace: a validating webhook for its
/// Workloads (failurePolicy Fail, as Kueue's own) at a port nobody listens on. Other namespaces
/// (the tests running beside) are not affected. Returns the webhook configuration's name.
async fn kueue_down(env: &TestEnv) -> String {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let name = format!("kueue-down-{}", env.ns);
    let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "vworkload.kueue-down.test",
            "clientConfig": {"url": format!("https://127.0.0.1:{closed}/validate")},
            "rules": [{"apiGroups": ["kueue.x-k8s.io"], "apiVersions": ["*"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["workloads", "workloads/status"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": env.ns}},
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
        }]
    }))
    .expect("webhook configuration");
    let api: Api<ValidatingWebhookConfiguration> = Api::all(env.client.clone());
    api.create(&PostParams::default(), &config)
        .await
        .expect("Kueue down");
    name
}

/// While Kueue was down, a new slice showed no status at all: its Workload's create failed on
/// Kueue's webhook and the error went only to the log. Now its status says so (Stalled,
/// `KueueUnavailable`, the failed call), and once Kueue answers again the slice runs.
#[tokio::test]
async fn a_slice_says_so_in_its_status_while_kueue_does_not_answer() {
    let Some(env) = start().await else { return };
    queue(&env, "tpu", 8, None).await;
    let webhook = kueue_down(&env).await;
    // The API server's webhook informer takes the new configuration within a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let created = Instant::now();
    env.create(&slice("blind", "tpu", None)).await;
    let s: TpuSlice = env
        .wait_for("blind", "KueueUnavailable in status", STEP, |s| {
            stalled_on(s, "KueueUnavailable")
        })
        .await;
    let shown = created.elapsed();
    let message = s.status.unwrap().message.unwrap_or_default();
    eprintln!(
        "KueueUnavailable in status {:.2} s after the slice was created: {message}",
        shown.as_secs_f64()
    );
    assert!(
        message.contains("create the Kueue Workload"),
        "names the call: {message}"
    );
    // The echo of that status write has run its pass (and failed again): the slice now waits
    // out its backoff.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(env.client.clone());
    api.delete(&webhook, &DeleteParams::default())
        .await
        .expect("Kueue back");
    let back = Instant::now();
    let (created, ready) = runs(&env, "blind", back).await;
    eprintln!(
        "node created {:.2} s, Ready {:.2} s after Kueue answered again",
        created.as_secs_f64(),
        ready.as_secs_f64()
    );
    // It ran again with no poll to run it: its backoff retried the create (two failed passes so
    // far, the create and the echo of its status write: at most 10 s on an idle machine).
    let s: TpuSlice = env.api().get("blind").await.unwrap();
    assert!(
        !stalled_on(&s, "KueueUnavailable"),
        "still says Kueue is down: {:#?}",
        s.status
    );
}

/// The slice's position in status (`None`: not shown).
fn shown_position(s: &TpuSlice) -> Option<i32> {
    s.status.as_ref()?.kueue.as_ref()?.position
}

/// The Workload's position (1 = next) as Kueue's visibility API has it right now.
async fn kueue_position(env: &TestEnv, queue: &str, workload: &str) -> Option<i64> {
    let path = format!(
        "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{}/localqueues/{queue}/pendingworkloads",
        env.ns
    );
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    let pending: serde_json::Value = env.client.request(request).await.expect("visibility API");
    pending["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == workload)
        .and_then(|p| p["positionInLocalQueue"].as_i64())
        .map(|p| p + 1)
}

/// After a hand-off, the waiters' positions in status followed Kueue's visibility API 20-22 s
/// late (at their capacity poll). A LocalQueue's status changes as its line moves, and that
/// wakes the queue's waiters: the third slice shows position 1 within seconds of Kueue saying so.
#[tokio::test]
async fn a_waiters_position_follows_kueues_line_within_seconds() {
    let Some(env) = start().await else { return };
    if !visibility() {
        eprintln!("SKIP: Kueue's visibility API is not served (TPU_OPERATOR_KUEUE_VISIBILITY=1)");
        return;
    }
    queue(&env, "tpu", 8, None).await;
    in_line(&env, &["first", "second", "third"]).await;
    env.wait_for::<TpuSlice, _>("first", "first Ready", STEP, ready)
        .await;
    let third: TpuSlice = env
        .wait_for("third", "third at position 2", STEP, |s| {
            shown_position(s) == Some(2)
        })
        .await;
    let workload = third.status.unwrap().kueue.unwrap().workload;
    // Its position's reads are done: the third now waits, as a deployed operator's would.
    tokio::time::sleep(Duration::from_secs(3)).await;

    env.api::<TpuSlice>()
        .delete("first", &DeleteParams::default())
        .await
        .expect("delete first");
    let deleted = Instant::now();
    let mut in_kueue = None;
    let lag = loop {
        if in_kueue.is_none() && kueue_position(&env, "tpu", &workload).await == Some(1) {
            in_kueue = Some(Instant::now());
        }
        let s: TpuSlice = env.api().get("third").await.unwrap();
        if let (Some(at), Some(1)) = (in_kueue, shown_position(&s)) {
            break at.elapsed();
        }
        assert!(
            deleted.elapsed() < test_kit::wait_limit(true),
            "position 1 not shown (Kueue says so: {}): {:#?}",
            in_kueue.is_some(),
            s.status
        );
        // The first's node deletion moves on (20 emulated seconds a step).
        env.gcp.clock().advance(STEP);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "third shown at position 1 {:.2} s after Kueue's visibility API said so ({:.2} s after first was deleted)",
        lag.as_secs_f64(),
        deleted.elapsed().as_secs_f64()
    );
}
