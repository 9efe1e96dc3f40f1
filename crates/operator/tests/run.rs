//! `tpu-operator run` as a process against kube-emulator (served on a loopback socket, with a
//! kubeconfig) and gcp-emulator (accelerated clock), both in the test process: it reconciles an
//! example to Ready, serves /metrics /healthz /readyz, exits 0 on SIGTERM releasing its lease, and
//! of two replicas only the lease holder acts until it is killed, then the other takes over.

mod process;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use process::{
    BIN, OperatorProcess as Replica, create_slice, free_port, run_command, wait_slice_ready, wait_until,
};

const LEASE: &str = "tpu-operator";
/// Short, so the takeover test is fast.
const LEASE_SECONDS: u64 = 3;

/// Both emulators and a kubeconfig for the Kubernetes one.
struct Env {
    /// Always the emulator (these checks need no real control plane): served on a socket with a
    /// kubeconfig for the processes, reached in-process by `client`.
    cluster: test_kit::TestCluster,
    client: kube::Client,
    gcp: gcp_emulator::Emulator,
}

impl Env {
    async fn start() -> Self {
        Self::start_at(600.0).await
    }

    /// Cloud time `scale` times faster than real time.
    async fn start_at(scale: f64) -> Self {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let cluster = test_kit::TestCluster::emulator()
            .await
            .expect("kube-emulator on a socket");
        let kube = cluster.emulator_handle().expect("an emulated cluster");
        test_kit::emulators::install_crds(kube).expect("install CRDs");
        let gcp = gcp_emulator::Emulator::builder()
            .time_scale(scale)
            .start()
            .await
            .expect("gcp-emulator");
        Self {
            client: cluster.client.clone(),
            cluster,
            gcp,
        }
    }

    /// Starts a replica with its own metrics port.
    fn replica(&self, identity: &str) -> Replica {
        let metrics = free_port();
        let mut cmd = run_command(BIN, self.cluster.kubeconfig(), metrics, "run-test");
        cmd.args(["--gcp-emulator", &self.gcp.url()])
            .args(["--identity", identity])
            .args(["--lease-duration", &format!("{LEASE_SECONDS}s")]);
        Replica::spawn(cmd, metrics)
    }

    async fn holder(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), "default");
        leases.get_opt(LEASE).await.unwrap()?.spec?.holder_identity
    }

    async fn create_slice(&self, name: &str) {
        create_slice(&self.client, name).await;
    }

    async fn wait_ready(&self, name: &str) {
        wait_slice_ready(&self.client, name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciles_serves_metrics_and_health_and_exits_cleanly_on_sigterm() {
    let env = Env::start().await;
    let mut a = env.replica("replica-a");
    a.wait_ready().await;
    assert_eq!(a.get("/healthz").await, Some((200, "ok".into())));
    wait_until("replica-a to lead", Duration::from_secs(30), async || {
        a.leading().await
    })
    .await;

    env.create_slice("run-slice").await;
    env.wait_ready("run-slice").await;
    assert!(env.gcp.call_count("tpu", "queuedResources.create") >= 1);

    let (status, metrics) = a.get("/metrics").await.expect("/metrics answers");
    assert_eq!(status, 200);
    for needle in [
        "tpu_operator_reconciles_total{kind=\"TpuSlice\"}",
        "tpu_operator_reconcile_duration_seconds_count{kind=\"TpuSlice\"}",
        "gcp_calls_total{service=\"tpu\"",
        "tpu_operator_leader 1",
    ] {
        assert!(metrics.contains(needle), "/metrics lacks {needle}:\n{metrics}");
    }

    a.signal("-TERM");
    assert_eq!(
        a.wait_exit(Duration::from_secs(30)),
        Some(true),
        "SIGTERM must exit 0"
    );
    assert_eq!(env.holder().await, None, "a clean shutdown releases the lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_replica_stays_passive_until_the_leader_is_killed_then_takes_over() {
    let env = Env::start().await;
    let a = env.replica("replica-a");
    a.wait_ready().await;
    wait_until(
        "replica-a to hold the lease",
        Duration::from_secs(30),
        async || env.holder().await.as_deref() == Some("replica-a"),
    )
    .await;

    let mut b = env.replica("replica-b");
    b.wait_ready().await;
    // Over more than a full lease period (so at least one renewal by A happened), B never leads.
    let passive_until = Instant::now() + Duration::from_secs(LEASE_SECONDS + 1);
    while Instant::now() < passive_until {
        assert!(
            !b.leading().await,
            "the standby must not run controllers while A leads"
        );
        assert_eq!(env.holder().await.as_deref(), Some("replica-a"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // SIGKILL: A cannot release the lease; B must wait for it to expire, then take over.
    drop(a);
    let took = wait_until("replica-b to take over", Duration::from_secs(30), async || {
        env.holder().await.as_deref() == Some("replica-b") && b.leading().await
    })
    .await;
    println!("replica-b took over {took:?} after replica-a was killed");
    // Expiry is at most one lease duration after A's last renewal; allow one more for polling.
    assert!(
        took <= Duration::from_secs(2 * LEASE_SECONDS),
        "takeover took {took:?}, more than twice the {LEASE_SECONDS}s lease"
    );

    // The new leader acts.
    env.create_slice("after-takeover").await;
    env.wait_ready("after-takeover").await;

    b.signal("-TERM");
    assert_eq!(
        b.wait_exit(Duration::from_secs(30)),
        Some(true),
        "SIGTERM must exit 0"
    );
}

/// Issue 36 item 2: `tpu-operator logs -f` follows a TPU VM pipeline across a retry: the failed
/// attempt's lines through its traceback (read once more after the pipeline moved on), then the
/// retry's, and it ends by itself when the retry has succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_a_tpu_vm_pipeline_across_a_retry() {
    use tpu_operator_api::training_pipeline::{TrainingPipeline, TrainingPipelinePhase};
    // Cloud time at real speed with short durations: `run` reads the wall clock, and a run
    // decides which completion marker is its own by comparing the marker's time with its start.
    let env = Env::start_at(1.0).await;
    let mut config = env.gcp.config();
    let s = Duration::from_secs;
    config.durations.tpu_create = s(1);
    config.durations.tpu_delete = s(1);
    config.durations.tpu_workload = s(3);
    config.durations.workload_checkpoint = s(1);
    env.gcp.set_config(config);
    let operator = env.replica("replica-a");
    operator.wait_ready().await;
    let mut tp: TrainingPipeline =
        serde_yaml::from_str(include_str!("../../../examples/tpu-vm-pipeline.yaml")).unwrap();
    tp.metadata.namespace = Some("default".into());
    tp.spec.preprocess = None;
    tp.spec.max_retries = 1;
    let api: Api<TrainingPipeline> = Api::namespaced(env.client.clone(), "default");
    api.create(&Default::default(), &tp).await.unwrap();
    // The first attempt's workload fails when it ends (every node made from now on would, so
    // the fault is lifted as soon as the retry's node exists).
    let first = loop {
        if let Some(n) = env.gcp.nodes().first() {
            break n["name"].as_str().unwrap().to_string();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    env.gcp
        .inject(gcp_emulator::Fault::FailTpuWorkload {
            node: first.clone(),
            exit_code: Some(1),
            message: None,
        })
        .unwrap();
    let follow = std::process::Command::new(BIN)
        .args([
            "logs",
            "tpl/tpu-vm-pipeline",
            "-f",
            "--interval",
            "200ms",
            "--kubeconfig",
        ])
        .arg(env.cluster.kubeconfig())
        .args(["--gcp-emulator", &env.gcp.url()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The retry's node is another node: the fault goes once it exists.
    wait_until("the retry's node", Duration::from_secs(60), async || {
        env.gcp
            .nodes()
            .iter()
            .any(|n| n["name"].as_str() != Some(first.as_str()))
    })
    .await;
    env.gcp.clear_faults();
    let out = tokio::task::spawn_blocking(move || follow.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = api.get("tpu-vm-pipeline").await.unwrap();
    let st = done.status.unwrap();
    assert_eq!(st.phase, TrainingPipelinePhase::Succeeded, "{:?}", st.message);
    assert_eq!(st.attempts, 2);
    let lines: Vec<&str> = stdout.lines().collect();
    let pos = |needle: &str, from: usize| {
        lines[from..]
            .iter()
            .position(|l| l.contains(needle))
            .map(|p| p + from)
            .unwrap_or_else(|| panic!("{needle:?} after line {from} not in:\n{stdout}"))
    };
    let traceback = pos("RuntimeError: simulated training failure", 0);
    let retry = pos("Workload container started", traceback);
    pos("Training finished: the model was saved", retry);
    drop(operator);
}

/// `tpu-operator capacity` through the real path: a zone out of v6e stock refuses the leader's
/// first create, its stockout memory blocks the place for every slice, the leader publishes
/// that into the ConfigMap, and the command (the binary, with nothing but a kubeconfig) prints
/// the blocked place with its expiry and the slices waiting there. Without the ConfigMap it
/// still prints the waiting slices, and says what it could not read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_prints_the_leaders_blocked_place_and_the_slices_waiting_there() {
    // Real speed: `run` reads the wall clock, so the 5-minute block outlasts the test.
    let env = Env::start_at(1.0).await;
    env.gcp.set_stock(gcp_emulator::StockSpec {
        zone: CAPACITY_ZONE.into(),
        accelerator: "v6e".into(),
        kind: gcp_emulator::CapacityKind::OnDemand,
        chips: 0,
        steps: Vec::new(),
        refill: None,
    });
    let leader = env.replica("replica-a");
    leader.wait_ready().await;
    wait_until("replica-a to lead", Duration::from_secs(30), async || {
        leader.leading().await
    })
    .await;
    create_waiting_slices(&env).await;
    let place = published_place(&env).await;
    assert_eq!(
        (
            &place["project"],
            &place["zone"],
            &place["accelerator"],
            &place["kind"],
            &place["strikes"]
        ),
        (
            &serde_json::json!("demo-project"),
            &serde_json::json!(CAPACITY_ZONE),
            &serde_json::json!("v6e-8"),
            &serde_json::json!("onDemand"),
            &serde_json::json!(1)
        ),
        "{place:#}"
    );
    let until = place["blockedUntil"].as_str().unwrap().to_owned();

    let table = capacity(&env, &["--operator-namespace", "default"]);
    println!("{table}");
    let blocked = table
        .lines()
        .find(|l| l.starts_with("demo-project") && l.contains(" blocked "))
        .unwrap_or_else(|| panic!("no blocked place:\n{table}"));
    for cell in [CAPACITY_ZONE, "v6e-8", "onDemand", &format!("{until} (in ")] {
        assert!(blocked.contains(cell), "{cell:?} missing from {blocked:?}");
    }
    let waiting = table
        .lines()
        .find(|l| l.contains("WaitingForCapacity (Stockout)"))
        .unwrap_or_else(|| panic!("no waiting group:\n{table}"));
    assert!(
        waiting.contains(CAPACITY_ZONE) && waiting.contains("  3  "),
        "{waiting:?}"
    );
    assert!(
        waiting.contains("default/wait-a,default/wait-b,default/wait-c"),
        "{waiting:?}"
    );
    assert!(!table.contains("Not shown"), "everything was readable:\n{table}");

    let json: serde_json::Value = serde_json::from_str(&capacity(
        &env,
        &["--operator-namespace", "default", "-o", "json"],
    ))
    .unwrap();
    assert_eq!(
        json["memory"]["places"][0]["blockedUntil"],
        serde_json::json!(until)
    );
    let names = WAITING_SLICES.map(|s| format!("default/{s}"));
    assert_eq!(json["waiting"][0]["slices"], serde_json::json!(names));

    // The wrong namespace: no memory, and says so, but the waiting slices still show.
    let partial = capacity(&env, &["--operator-namespace", "elsewhere"]);
    assert!(partial.starts_with("Stockout memory: not read"), "{partial}");
    assert!(partial.contains("Waiting slices (3)"), "{partial}");
    assert!(
        partial.contains("ConfigMap elsewhere/tpu-operator-capacity): not found"),
        "{partial}"
    );
}

/// The zone the capacity test empties of v6e, and the on-demand slices that wait there.
const CAPACITY_ZONE: &str = "us-east5-b";
const WAITING_SLICES: [&str; 3] = ["wait-a", "wait-b", "wait-c"];

/// Creates [`WAITING_SLICES`] (v6e-8 on demand in [`CAPACITY_ZONE`]) and waits until each is
/// `Waiting`.
async fn create_waiting_slices(env: &Env) {
    use tpu_operator_api::tpu_slice::{TpuSlice, TpuSlicePhase};
    let slices: Api<TpuSlice> = Api::namespaced(env.client.clone(), "default");
    for name in WAITING_SLICES {
        let slice: TpuSlice = serde_json::from_value(serde_json::json!({
            "apiVersion": "tpu-operator.dev/v1beta1",
            "kind": "TpuSlice",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "project": "demo-project",
                "zone": CAPACITY_ZONE,
                "acceleratorType": "v6e-8",
                "runtimeVersion": "v2-alpha-tpuv6e",
                "capacity": {"onDemand": {}},
            }
        }))
        .unwrap();
        slices.create(&Default::default(), &slice).await.unwrap();
    }
    wait_until(
        "every slice to wait for capacity",
        Duration::from_secs(60),
        async || {
            let list = slices.list(&Default::default()).await.unwrap().items;
            list.len() == WAITING_SLICES.len()
                && list.iter().all(|s| {
                    s.status
                        .as_ref()
                        .is_some_and(|st| st.phase == TpuSlicePhase::Waiting)
                })
        },
    )
    .await;
}

/// The first place of the snapshot the leader published in `default`, once there is one (read
/// with the same client kubectl would use).
async fn published_place(env: &Env) -> serde_json::Value {
    use k8s_openapi::api::core::v1::ConfigMap;
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let mut published = serde_json::Value::Null;
    wait_until(
        "the leader to publish the blocked place",
        Duration::from_secs(30),
        async || {
            let data = maps
                .get_opt("tpu-operator-capacity")
                .await
                .unwrap()
                .and_then(|c| c.data);
            published = data
                .and_then(|d| d.get("snapshot.json").cloned())
                .map_or(serde_json::Value::Null, |t| serde_json::from_str(&t).unwrap());
            published["places"].as_array().is_some_and(|p| !p.is_empty())
        },
    )
    .await;
    published["places"][0].clone()
}

/// `tpu-operator capacity ARGS` with the cluster's kubeconfig: its stdout, once it exited 0.
fn capacity(env: &Env, args: &[&str]) -> String {
    let out = std::process::Command::new(BIN)
        .arg("capacity")
        .arg("--kubeconfig")
        .arg(env.cluster.kubeconfig())
        .args(args)
        .output()
        .expect("run tpu-operator capacity");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
