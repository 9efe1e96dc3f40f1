//! The GCP client layer against the in-process `gcp-emulator`, through the real Google clients
//! (HTTP on loopback, anonymous credentials, manual emulator clock).

use std::{sync::Arc, time::Duration};

use gcp_emulator::{Code, Emulator, Fault};
use prometheus_client::registry::Registry;
use tpu_operator_gcp::{
    ErrorKind, Gcp, GcpConfig, GcpError, GcpMetrics, OperationState, Service,
    aiplatform_v1::model::{
        ContainerSpec, CustomJob, CustomJobSpec, GcsDestination, JobState, MachineSpec, WorkerPoolSpec,
    },
    dataproc_v1::model::{Batch, PySparkBatch, batch},
    ignore_not_found, operation_result, operation_state,
    tpu_v2::model::{Node, QueuedResource, node, queued_resource, queued_resource_state},
};

/// Queued-resource request ids are UUIDs: the API documents `requestId` as "Idempotent request
/// UUID", and gcp-emulator refuses anything else.
const QR1_REQUEST: &str = "6f1c1c2e-0b7a-4f4e-9a51-3c1f2b9d0a01";
const OTHER_REQUEST: &str = "6f1c1c2e-0b7a-4f4e-9a51-3c1f2b9d0a02";
const QR2_REQUEST: &str = "6f1c1c2e-0b7a-4f4e-9a51-3c1f2b9d0a03";
const ZONE_PARENT: &str = "projects/p/locations/us-central2-b";
const REGION_PARENT: &str = "projects/p/locations/us-central1";
const UID: &str = "0b6f3a52-2d7e-4c1e-9a57-0f1e2d3c4b5a";

struct Env {
    emu: Emulator,
    gcp: Gcp,
    metrics: GcpMetrics,
}

async fn env() -> Env {
    env_with(|_| {}).await
}

async fn env_with(tune: impl FnOnce(&mut GcpConfig)) -> Env {
    // Google's clients and reqwest build TLS configs even for http:// endpoints.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let start = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .to_utc();
    let emu = Emulator::builder()
        .manual_clock(start)
        .start()
        .await
        .expect("emulator starts");
    let mut config = GcpConfig::emulator(emu.url().parse().unwrap());
    tune(&mut config);
    let metrics = GcpMetrics::register(&mut Registry::default());
    let gcp = Gcp::connect(config, metrics.clone())
        .await
        .expect("clients build");
    Env { emu, gcp, metrics }
}

impl Env {
    fn advance(&self, secs: u64) {
        self.emu.clock().advance(Duration::from_secs(secs));
    }
}

fn node_spec(accelerator: &str) -> Node {
    Node::new()
        .set_accelerator_type(accelerator)
        .set_runtime_version("tpu-ubuntu2204-base")
        .set_labels([("managed-by", "tpu-operator"), ("tpu-operator-uid", UID)])
}

fn expect_err<T: std::fmt::Debug>(result: Result<T, GcpError>) -> GcpError {
    result.expect_err("the call should fail")
}

#[tokio::test]
async fn tpu_node_lifecycle_through_operations() {
    let env = env().await;
    let tpu = &env.gcp.tpu;
    let name = format!("{ZONE_PARENT}/nodes/n1");

    let op = tpu
        .create_node(ZONE_PARENT, "n1", node_spec("v5litepod-8"))
        .await
        .unwrap();
    assert!(!op.name.is_empty());
    assert_eq!(operation_state(Service::Tpu, &op), OperationState::Pending);
    // The create operation is never waited on: the node is visible at once, CREATING.
    assert_eq!(tpu.get_node(&name).await.unwrap().state, node::State::Creating);
    let dup = expect_err(tpu.create_node(ZONE_PARENT, "n1", node_spec("v5litepod-8")).await);
    assert_eq!(dup.kind, ErrorKind::AlreadyExists, "{dup}");

    env.advance(600);
    let polled = tpu.get_operation(&op.name).await.unwrap();
    let OperationState::Succeeded(created) = operation_result::<Node>(Service::Tpu, &polled).unwrap() else {
        panic!("create should be done: {polled:?}");
    };
    assert_eq!(created.name, name);
    assert_eq!(created.state, node::State::Ready);
    let got = tpu.get_node(&name).await.unwrap();
    assert_eq!(got.state, node::State::Ready);
    assert_eq!(got.labels.get("tpu-operator-uid").map(String::as_str), Some(UID));

    // Drift correction: patch labels and metadata under an update mask.
    let patch = Node::new()
        .set_labels([
            ("managed-by", "tpu-operator"),
            ("tpu-operator-uid", UID),
            ("team", "ml"),
        ])
        .set_metadata([("tpu-operator-done-uri", "gs://bkt/models/run-1/")]);
    let op = tpu
        .update_node(&name, patch, &["labels", "metadata"])
        .await
        .unwrap();
    env.advance(60);
    let polled = tpu.get_operation(&op.name).await.unwrap();
    assert!(matches!(
        operation_result::<Node>(Service::Tpu, &polled),
        Ok(OperationState::Succeeded(_))
    ));
    let got = tpu.get_node(&name).await.unwrap();
    assert_eq!(got.labels.get("team").map(String::as_str), Some("ml"));
    assert_eq!(
        got.metadata.get("tpu-operator-done-uri").map(String::as_str),
        Some("gs://bkt/models/run-1/")
    );

    let op = tpu.stop_node(&name).await.unwrap();
    env.advance(600);
    assert_eq!(
        operation_state(Service::Tpu, &tpu.get_operation(&op.name).await.unwrap()),
        OperationState::Succeeded(())
    );
    assert_eq!(tpu.get_node(&name).await.unwrap().state, node::State::Stopped);
    tpu.start_node(&name).await.unwrap();
    env.advance(600);
    assert_eq!(tpu.get_node(&name).await.unwrap().state, node::State::Ready);

    let listed = tpu.list_nodes(ZONE_PARENT).await.unwrap();
    assert_eq!(
        listed.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        [name.as_str()]
    );

    let op = tpu.delete_node(&name).await.unwrap();
    env.advance(600);
    let polled = tpu.get_operation(&op.name).await.unwrap();
    assert_eq!(
        operation_state(Service::Tpu, &polled),
        OperationState::Succeeded(())
    );
    let gone = tpu.get_node(&name).await;
    assert_eq!(expect_err(tpu.get_node(&name).await).kind, ErrorKind::NotFound);
    assert_eq!(ignore_not_found(gone), Ok(None));
    assert!(tpu.list_nodes(ZONE_PARENT).await.unwrap().is_empty());

    // Metrics count exactly what the emulator answered (the clients never retry on their own).
    assert_eq!(
        env.metrics.calls(Service::Tpu, "nodes.get", "ok")
            + env.metrics.calls(Service::Tpu, "nodes.get", "not_found"),
        env.emu.call_count("tpu", "nodes.get")
    );
    assert_eq!(
        env.metrics.calls(Service::Tpu, "nodes.create", "already_exists"),
        1
    );
    assert_eq!(env.emu.call_count("tpu", "nodes.create"), 2);
}

/// `nodes.performMaintenance` goes through the `v2alpha1` call (Google's v2 client has no such
/// method): a reschedulable notice starts at once, its operation ends with the maintenance, and
/// a node with nothing pending refuses it as a failed precondition.
#[tokio::test]
async fn a_reschedulable_maintenance_starts_when_asked_through_v2alpha1() {
    let env = env().await;
    let tpu = &env.gcp.tpu;
    let name = format!("{ZONE_PARENT}/nodes/n1");
    tpu.create_node(ZONE_PARENT, "n1", node_spec("v5litepod-8"))
        .await
        .unwrap();
    env.advance(600);
    let refused = expect_err(tpu.perform_maintenance(&name).await);
    assert_eq!(refused.kind, ErrorKind::FailedPrecondition, "{refused}");
    assert_eq!(refused.method, "nodes.performMaintenance");

    let notice = Fault::ScheduleMaintenance {
        name: name.clone(),
        start_in_secs: 86_400,
        duration_secs: 300,
        can_reschedule: true,
        unscheduled: false,
    };
    env.emu.inject(notice).unwrap();
    let op = tpu.perform_maintenance(&name).await.unwrap();
    assert_eq!(operation_state(Service::Tpu, &op), OperationState::Pending);
    let node = tpu.get_node(&name).await.unwrap();
    assert_eq!(node.health, node::Health::UnhealthyMaintenance);
    env.advance(301);
    let polled = tpu.get_operation(&op.name).await.unwrap();
    assert_eq!(
        operation_state(Service::Tpu, &polled),
        OperationState::Succeeded(())
    );
    assert_eq!(env.emu.call_count("tpu", "nodes.performMaintenance"), 2);
    assert_eq!(
        env.metrics.calls(Service::Tpu, "nodes.performMaintenance", "ok"),
        1
    );
}

fn queued_resource(node_id: &str) -> QueuedResource {
    QueuedResource::new()
        .set_tpu(
            queued_resource::Tpu::new().set_node_spec([queued_resource::tpu::NodeSpec::new()
                .set_parent(ZONE_PARENT)
                .set_node_id(node_id)
                .set_node(node_spec("v6e-8"))]),
        )
        .set_spot(queued_resource::Spot::new())
}

#[tokio::test]
async fn queued_resource_create_is_idempotent_by_request_id_and_waits_for_capacity() {
    let env = env().await;
    let tpu = &env.gcp.tpu;
    env.emu
        .inject(Fault::Stockout {
            zone: "us-central2-b".into(),
            accelerator: "v6e".into(),
        })
        .unwrap();

    // A stockout on a direct create is RESOURCE_EXHAUSTED, a capacity wait (not a quick retry).
    let stockout = expect_err(tpu.create_node(ZONE_PARENT, "direct", node_spec("v6e-8")).await);
    assert_eq!(
        (stockout.kind, stockout.http_status),
        (ErrorKind::ResourceExhausted, Some(429))
    );
    assert!(
        !stockout.is_retryable() && !stockout.is_rate_limited(),
        "{stockout}"
    );

    let name = format!("{ZONE_PARENT}/queuedResources/qr1");
    let first = tpu
        .create_queued_resource(ZONE_PARENT, "qr1", QR1_REQUEST, queued_resource("qr1-node"))
        .await
        .unwrap();
    // The operator died before recording the operation: the same request id replays it.
    let replay = tpu
        .create_queued_resource(ZONE_PARENT, "qr1", QR1_REQUEST, queued_resource("qr1-node"))
        .await
        .unwrap();
    assert_eq!(replay.name, first.name);
    let dup = expect_err(
        tpu.create_queued_resource(ZONE_PARENT, "qr1", OTHER_REQUEST, queued_resource("x"))
            .await,
    );
    assert_eq!(dup.kind, ErrorKind::AlreadyExists);

    env.advance(600);
    let state = |qr: QueuedResource| qr.state.map(|s| s.state).unwrap_or_default();
    let polled = tpu.get_operation(&first.name).await.unwrap();
    assert!(matches!(
        operation_result::<QueuedResource>(Service::Tpu, &polled),
        Ok(OperationState::Succeeded(_))
    ));
    let waiting = tpu.get_queued_resource(&name).await.unwrap();
    assert_eq!(state(waiting), queued_resource_state::State::WaitingForResources);

    env.emu
        .inject(Fault::LiftStockout {
            zone: "us-central2-b".into(),
            accelerator: "v6e".into(),
        })
        .unwrap();
    env.advance(600);
    assert_eq!(
        state(tpu.get_queued_resource(&name).await.unwrap()),
        queued_resource_state::State::Active
    );
    let listed = tpu.list_queued_resources(ZONE_PARENT).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        tpu.get_node(&format!("{ZONE_PARENT}/nodes/qr1-node"))
            .await
            .unwrap()
            .state,
        node::State::Ready
    );

    let op = tpu.delete_queued_resource(&name, true).await.unwrap();
    env.advance(600);
    assert_eq!(
        operation_state(Service::Tpu, &tpu.get_operation(&op.name).await.unwrap()),
        OperationState::Succeeded(())
    );
    assert!(expect_err(tpu.get_queued_resource(&name).await).is_not_found());
    assert!(tpu.list_queued_resources(ZONE_PARENT).await.unwrap().is_empty());
}

#[tokio::test]
async fn queued_resource_reset_after_service_preemption() {
    let env = env().await;
    let tpu = &env.gcp.tpu;
    let name = format!("{ZONE_PARENT}/queuedResources/qr2");
    tpu.create_queued_resource(ZONE_PARENT, "qr2", QR2_REQUEST, queued_resource("qr2-node"))
        .await
        .unwrap();
    env.advance(1200);
    env.emu
        .inject(Fault::PreemptQueuedResource { name: name.clone() })
        .unwrap();
    env.advance(600);
    let suspended = tpu.get_queued_resource(&name).await.unwrap().state.unwrap();
    assert_eq!(suspended.state, queued_resource_state::State::Suspended);
    assert_eq!(
        suspended.state_initiator,
        queued_resource_state::StateInitiator::Service
    );

    let op = tpu.reset_queued_resource(&name).await.unwrap();
    assert!(!op.name.is_empty());
    env.advance(1200);
    let state = tpu.get_queued_resource(&name).await.unwrap().state.unwrap().state;
    assert_eq!(state, queued_resource_state::State::Active);
}

fn batch(output: &str) -> Batch {
    Batch::new()
        .set_pyspark_batch(
            PySparkBatch::new()
                .set_main_python_file_uri("gs://code/preprocess.py")
                .set_args(["gs://raw/", output]),
        )
        .set_labels([("managed-by", "tpu-operator"), ("tpu-operator-uid", UID)])
}

#[tokio::test]
async fn dataproc_batch_create_list_cancel_delete() {
    let env = env().await;
    let dataproc = &env.gcp.dataproc;
    let name = format!("{REGION_PARENT}/batches/ppb-0001");

    let op = dataproc
        .create_batch(REGION_PARENT, "ppb-0001", "req-ppb-0001", batch("gs://out/a/"))
        .await
        .unwrap();
    let replay = dataproc
        .create_batch(REGION_PARENT, "ppb-0001", "req-ppb-0001", batch("gs://out/a/"))
        .await
        .unwrap();
    assert_eq!(replay.name, op.name, "same requestId returns the first operation");
    let dup = expect_err(
        dataproc
            .create_batch(REGION_PARENT, "ppb-0001", "req-2", batch("gs://out/a/"))
            .await,
    );
    assert_eq!(dup.kind, ErrorKind::AlreadyExists);

    let got = dataproc.get_batch(&name).await.unwrap();
    assert_eq!(got.state, batch::State::Pending);
    assert_eq!(got.operation, op.name);

    let filter = format!(r#"labels.tpu-operator-uid = "{UID}""#);
    let mine = dataproc.list_batches(REGION_PARENT, &filter).await.unwrap();
    assert_eq!(
        mine.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(),
        [name.as_str()]
    );
    assert!(
        dataproc
            .list_batches(REGION_PARENT, r#"labels.tpu-operator-uid = "other""#)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(dataproc.list_batches(REGION_PARENT, "").await.unwrap().len(), 1);

    env.advance(90);
    assert_eq!(
        dataproc.get_batch(&name).await.unwrap().state,
        batch::State::Running
    );
    let refused = expect_err(dataproc.delete_batch(&name).await);
    assert_eq!(refused.kind, ErrorKind::FailedPrecondition, "{refused}");

    dataproc.cancel_operation(&got.operation).await.unwrap();
    assert_eq!(
        dataproc.get_batch(&name).await.unwrap().state,
        batch::State::Cancelling
    );
    env.advance(60);
    assert_eq!(
        dataproc.get_batch(&name).await.unwrap().state,
        batch::State::Cancelled
    );
    let polled = dataproc.get_operation(&op.name).await.unwrap();
    match operation_result::<Batch>(Service::Dataproc, &polled).unwrap() {
        OperationState::Succeeded(done) => assert_eq!(done.state, batch::State::Cancelled),
        OperationState::Failed(err) => assert_eq!(err.kind, ErrorKind::Cancelled),
        OperationState::Pending => panic!("the create operation ends with the batch"),
    }

    dataproc.delete_batch(&name).await.unwrap();
    assert!(expect_err(dataproc.get_batch(&name).await).is_not_found());
}

fn custom_job(uid: &str) -> CustomJob {
    CustomJob::new()
        .set_display_name("train-1")
        .set_labels([("managed-by", "tpu-operator"), ("tpu-operator-uid", uid)])
        .set_job_spec(
            CustomJobSpec::new()
                .set_worker_pool_specs([WorkerPoolSpec::new()
                    .set_machine_spec(
                        MachineSpec::new()
                            .set_machine_type("ct6e-standard-4t")
                            .set_tpu_topology("2x2"),
                    )
                    .set_replica_count(1)
                    .set_container_spec(
                        ContainerSpec::new().set_image_uri("us-docker.pkg.dev/p/r/trainer:1"),
                    )])
                .set_base_output_directory(GcsDestination::new().set_output_uri_prefix("gs://models/run-1/")),
        )
}

#[tokio::test]
async fn vertex_custom_job_create_find_by_label_cancel_delete() {
    let env = env().await;
    let vertex = &env.gcp.vertex;

    let job = vertex
        .create_custom_job(REGION_PARENT, custom_job(UID))
        .await
        .unwrap();
    // Server-assigned name, with the project number: found again by label, not by name.
    assert!(
        job.name.contains("/locations/us-central1/customJobs/"),
        "{}",
        job.name
    );
    vertex
        .create_custom_job(REGION_PARENT, custom_job("someone-else"))
        .await
        .unwrap();

    let filter = format!(r#"labels.tpu-operator-uid="{UID}""#);
    let found = vertex.list_custom_jobs(REGION_PARENT, &filter).await.unwrap();
    assert_eq!(
        found.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(),
        [job.name.as_str()]
    );
    assert_eq!(vertex.list_custom_jobs(REGION_PARENT, "").await.unwrap().len(), 2);

    env.advance(120);
    assert_eq!(
        vertex.get_custom_job(&job.name).await.unwrap().state,
        JobState::Running
    );
    let refused = expect_err(vertex.delete_custom_job(&job.name).await);
    assert_eq!(refused.kind, ErrorKind::FailedPrecondition, "{refused}");

    vertex.cancel_custom_job(&job.name).await.unwrap();
    env.advance(60);
    let cancelled = vertex.get_custom_job(&job.name).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert_eq!(cancelled.error.map(|status| status.code), Some(1));

    let op = vertex.delete_custom_job(&job.name).await.unwrap();
    env.advance(60);
    let polled = vertex.get_operation(&op.name).await.unwrap();
    assert_eq!(
        operation_state(Service::Vertex, &polled),
        OperationState::Succeeded(())
    );
    assert!(expect_err(vertex.get_custom_job(&job.name).await).is_not_found());

    // A name without a region is refused before anything is sent.
    let calls_before = env.emu.calls().len();
    let bad = expect_err(vertex.get_custom_job("customJobs/1").await);
    assert_eq!(bad.kind, ErrorKind::InvalidArgument);
    assert_eq!(env.emu.calls().len(), calls_before);
}

#[tokio::test]
async fn storage_prefix_listing_and_markers() {
    let env = env().await;
    let storage = &env.gcp.storage;
    env.emu
        .put_object("bkt", "models/run-1/_FAILED", "exit code 3\n", "text/plain");
    env.emu.put_object(
        "bkt",
        "models/run-1/checkpoints/ckpt-1",
        vec![0u8; 10],
        "application/octet-stream",
    );
    env.emu
        .put_object("bkt", "models/run-10/_SUCCESS", "", "text/plain");
    env.emu.put_object("bkt", "dir with space/x", "y", "text/plain");

    assert!(storage.prefix_exists("gs://bkt/models/run-1/").await.unwrap());
    assert!(!storage.prefix_exists("gs://bkt/models/run-2/").await.unwrap());
    assert!(storage.prefix_exists("gs://bkt/dir with space/").await.unwrap());
    assert!(storage.prefix_exists("gs://bkt").await.unwrap());
    let missing_bucket = expect_err(storage.prefix_exists("gs://no-such-bucket/x/").await);
    assert_eq!(missing_bucket.kind, ErrorKind::NotFound, "{missing_bucket}");
    let bad = expect_err(storage.prefix_exists("s3://bkt/x").await);
    assert_eq!(bad.kind, ErrorKind::InvalidArgument);

    let objects = storage.list_objects("bkt", "models/run-1", 10).await.unwrap();
    let names: Vec<_> = objects.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "models/run-1/_FAILED",
            "models/run-1/checkpoints/ckpt-1",
            "models/run-10/_SUCCESS"
        ]
    );
    assert_eq!(objects[1].size, 10);
    assert_eq!(storage.list_objects("bkt", "models/", 2).await.unwrap().len(), 2);

    assert_eq!(
        storage
            .read_object("gs://bkt/models/run-1/_FAILED")
            .await
            .unwrap(),
        "exit code 3\n"
    );
    assert_eq!(
        storage.read_object("gs://bkt/dir with space/x").await.unwrap(),
        "y"
    );
    let missing = expect_err(storage.read_object("gs://bkt/models/run-2/_FAILED").await);
    assert_eq!(
        (missing.kind, missing.http_status),
        (ErrorKind::NotFound, Some(404))
    );
    assert_eq!(env.metrics.calls(Service::Storage, "objects.get", "not_found"), 1);
}

#[tokio::test]
async fn injected_faults_map_to_error_kinds_with_one_request_per_call() {
    let env = env().await;
    let name = format!("{ZONE_PARENT}/nodes/n1");
    let cases = [
        (Code::NotFound, ErrorKind::NotFound, 404, false),
        (Code::AlreadyExists, ErrorKind::AlreadyExists, 409, false),
        // A 429 on a read can only be a request-rate limit (reads take no capacity).
        (Code::ResourceExhausted, ErrorKind::ResourceExhausted, 429, true),
        (Code::PermissionDenied, ErrorKind::PermissionDenied, 403, false),
        (Code::Unauthenticated, ErrorKind::Unauthenticated, 401, false),
        (
            Code::FailedPrecondition,
            ErrorKind::FailedPrecondition,
            400,
            false,
        ),
        (Code::InvalidArgument, ErrorKind::InvalidArgument, 400, false),
        (Code::Unavailable, ErrorKind::Transient, 503, true),
        (Code::Internal, ErrorKind::Transient, 500, true),
        (Code::DeadlineExceeded, ErrorKind::Transient, 504, true),
    ];
    for (code, kind, http, retryable) in cases {
        let fault = |service: &str, method: &str| Fault::FailCalls {
            service: service.into(),
            method: method.into(),
            count: 1,
            code,
            message: Some(format!("injected {code:?}")),
        };
        env.emu.inject(fault("tpu", "nodes.get")).unwrap();
        let err = expect_err(env.gcp.tpu.get_node(&name).await);
        assert_eq!(
            (err.kind, err.http_status, err.is_retryable()),
            (kind, Some(http), retryable),
            "{err}"
        );
        assert_eq!(err.message, format!("injected {code:?}"));

        env.emu.inject(fault("dataproc", "batches.list")).unwrap();
        let err = expect_err(env.gcp.dataproc.list_batches(REGION_PARENT, "").await);
        assert_eq!((err.kind, err.service), (kind, Service::Dataproc), "{err}");

        env.emu.inject(fault("vertex", "customJobs.list")).unwrap();
        let err = expect_err(env.gcp.vertex.list_custom_jobs(REGION_PARENT, "").await);
        assert_eq!((err.kind, err.service), (kind, Service::Vertex), "{err}");

        env.emu.inject(fault("storage", "objects.list")).unwrap();
        let err = expect_err(env.gcp.storage.prefix_exists("gs://bkt/x/").await);
        assert_eq!((err.kind, err.http_status), (kind, Some(http)), "{err}");
    }
    // No client-side retries: even the 503s were exactly one request each.
    assert_eq!(env.emu.call_count("tpu", "nodes.get"), cases.len() as u64);
    assert_eq!(env.emu.call_count("dataproc", "batches.list"), cases.len() as u64);
    assert_eq!(env.metrics.calls(Service::Tpu, "nodes.get", "transient"), 3);
    assert_eq!(
        env.metrics
            .calls(Service::Storage, "objects.list", "resource_exhausted"),
        1
    );
}

#[tokio::test]
async fn slow_calls_end_at_the_call_timeout_as_transient() {
    let env = env_with(|config| config.call_timeout = Duration::from_millis(300)).await;
    let fault = |service: &str| Fault::Latency {
        service: service.into(),
        method: None,
        millis: 3_000,
        count: Some(1),
    };

    env.emu.inject(fault("tpu")).unwrap();
    let started = std::time::Instant::now();
    let err = expect_err(env.gcp.tpu.list_nodes(ZONE_PARENT).await);
    assert_eq!(err.kind, ErrorKind::Transient, "{err}");
    assert!(
        started.elapsed() < Duration::from_millis(2_500),
        "took {:?}",
        started.elapsed()
    );

    env.emu.inject(fault("storage")).unwrap();
    let err = expect_err(env.gcp.storage.prefix_exists("gs://bkt/x/").await);
    assert_eq!(err.kind, ErrorKind::Transient, "{err}");
}

#[tokio::test]
async fn the_bundle_is_shareable_across_tasks() {
    let env = env().await;
    let gcp = Arc::new(env.gcp.clone());
    let tasks: Vec<_> = (0..4)
        .map(|i| {
            let gcp = gcp.clone();
            tokio::spawn(async move {
                let spec = node_spec("v5litepod-8");
                gcp.tpu.create_node(ZONE_PARENT, &format!("par-{i}"), spec).await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(env.gcp.tpu.list_nodes(ZONE_PARENT).await.unwrap().len(), 4);
    assert_eq!(env.emu.nodes().len(), 4);
}

#[tokio::test]
async fn lists_follow_page_tokens() {
    let env = env().await;
    // The client asks for pages of 500 (`LIST_PAGE_SIZE`; Dataproc's default is 20, its
    // largest 1,000): 1,005 batches take three pages, where the default would take 51.
    for i in 0..1005 {
        let id = format!("page-{i:04}");
        env.gcp
            .dataproc
            .create_batch(REGION_PARENT, &id, &id, batch("gs://out/p/"))
            .await
            .unwrap();
    }
    let filter = format!(r#"labels.tpu-operator-uid = "{UID}""#);
    let all = env
        .gcp
        .dataproc
        .list_batches(REGION_PARENT, &filter)
        .await
        .unwrap();
    let mut names: Vec<_> = all.iter().map(|b| b.name.clone()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 1005);
    assert_eq!(env.emu.call_count("dataproc", "batches.list"), 3);
    assert_eq!(env.metrics.calls(Service::Dataproc, "batches.list", "ok"), 3);
}

/// POSTs `body` to the emulator's Cloud Logging `entries:{verb}` as the REST API takes it (what
/// gcloud and the Python client send without gRPC): the status and the reply.
async fn logging_rest(env: &Env, verb: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let url = format!(
        "{}/logging/v2/entries:{verb}",
        env.emu.url().trim_end_matches('/')
    );
    let reply = reqwest::Client::new().post(url).json(&body).send().await.unwrap();
    let status = reply.status().as_u16();
    (status, reply.json().await.unwrap_or_default())
}

/// One entry of docker's gcplogs driver for the container labelled `slice` (the shape moby's
/// `daemon/logger/gcplogs` writes).
fn docker_entry(project: &str, slice: &str, message: &str, severity: &str) -> serde_json::Value {
    serde_json::json!({
        "logName": format!("projects/{project}/logs/gcplogs-docker-driver"),
        "resource": {"type": "gce_instance", "labels": {"instance_id": "1", "zone": "us-east5-b"}},
        "severity": severity,
        "jsonPayload": {
            "container": {"name": "/tpu-workload", "metadata": {"tpu-operator-slice": slice}},
            "message": message,
        },
    })
}

/// Issue 36 item 4: entries written through the REST API are read back by Google's Cloud
/// Logging client (`ListLogEntries`, REST, enums as numbers) through the operator's
/// `LoggingApi`: the workload query selects one slice's entries, oldest first or newest first a
/// page at a time, severities decode, a value that tries to leave its quotes matches nothing,
/// and a refused call names the role to grant.
#[tokio::test]
async fn cloud_logging_entries_are_read_back_through_googles_client() {
    use tpu_operator_gcp::logging::{EntriesQuery, LogFilter, LogSource, Order, sources::SLICE_LABEL};
    let env = env().await;
    let entries = vec![
        docker_entry("p", "u1", "step 100", "INFO"),
        docker_entry("p", "u2", "another slice", "INFO"),
        docker_entry("p", "u1", "RuntimeError: boom", "ERROR"),
        docker_entry("other-project", "u1", "same labels, other project", "INFO"),
    ];
    for entry in entries {
        let (status, reply) = logging_rest(&env, "write", serde_json::json!({"entries": [entry]})).await;
        assert_eq!(status, 200, "{reply}");
        env.advance(1);
    }
    let slice = LogSource::Workload {
        project: "p".into(),
        labels: vec![(SLICE_LABEL, "u1".into())],
    };
    let query = |order, page_size, page_token: String| EntriesQuery {
        project: "p".into(),
        filter: slice.filter(),
        order,
        page_size,
        page_token,
    };
    let page = env
        .gcp
        .logging
        .list_entries(&query(Order::OldestFirst, 100, String::new()))
        .await
        .unwrap();
    let texts: Vec<&str> = page.lines.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(texts, ["step 100", "RuntimeError: boom"]);
    assert_eq!(page.lines[1].severity, "ERROR");
    assert!(page.lines[0].timestamp < page.lines[1].timestamp);
    assert!(page.next_page_token.is_empty());

    let first = env
        .gcp
        .logging
        .list_entries(&query(Order::NewestFirst, 1, String::new()))
        .await
        .unwrap();
    assert_eq!(first.lines[0].text, "RuntimeError: boom");
    assert!(!first.next_page_token.is_empty());
    let second = env
        .gcp
        .logging
        .list_entries(&query(Order::NewestFirst, 1, first.next_page_token))
        .await
        .unwrap();
    assert_eq!(second.lines[0].text, "step 100");
    assert_ne!(first.lines[0].insert_id, second.lines[0].insert_id);

    let hostile = EntriesQuery {
        filter: LogFilter::default().eq(&["resource", "type"], "x\" OR resource.type=\"gce_instance"),
        ..query(Order::OldestFirst, 100, String::new())
    };
    assert!(
        env.gcp
            .logging
            .list_entries(&hostile)
            .await
            .unwrap()
            .lines
            .is_empty()
    );

    env.emu
        .inject(Fault::FailCalls {
            service: "logging".into(),
            method: "logEntries.list".into(),
            count: 1,
            code: Code::PermissionDenied,
            message: None,
        })
        .unwrap();
    let err = expect_err(
        env.gcp
            .logging
            .list_entries(&query(Order::OldestFirst, 1, String::new()))
            .await,
    );
    assert_eq!(err.kind, ErrorKind::PermissionDenied);
    assert!(err.to_string().contains("roles/logging.viewer"), "{err}");
}

/// Issue 36 item 4: the emulator refuses what Cloud Logging refuses, naming the field: a list
/// without `resourceNames`, an `orderBy` other than by timestamp, a page over 1000, an unknown
/// field, a filter it cannot parse; an entry without `logName` or `resource`.
#[tokio::test]
async fn cloud_logging_refuses_bad_requests_naming_the_field() {
    let env = env().await;
    let list = serde_json::json!({"resourceNames": ["projects/p"]});
    let with = |k: &str, v: serde_json::Value| {
        let mut b = list.clone();
        b[k] = v;
        b
    };
    for (body, says) in [
        (serde_json::json!({}), "resource_names"),
        (with("orderBy", "severity desc".into()), "order_by"),
        (with("pageSize", 1001.into()), "page_size"),
        (with("pageTokn", "x".into()), "Unknown name \"pageTokn\""),
        (with("filter", "resource.type = (".into()), "Invalid filter"),
        (
            with("filter", "jsonPayload.\"unterminated = 1".into()),
            "Invalid filter",
        ),
    ] {
        let (status, reply) = logging_rest(&env, "list", body.clone()).await;
        assert_eq!(status, 400, "{body}: {reply}");
        let said = format!(
            "{} {}",
            reply["error"]["message"].as_str().unwrap_or_default(),
            reply["error"]["details"]
        );
        assert!(said.contains(says), "{body}: {reply}");
    }
    let (status, reply) = logging_rest(&env, "list", list).await;
    assert_eq!(
        (status, reply),
        (200, serde_json::json!({})),
        "nothing matches: an empty reply"
    );
    for (entry, says) in [
        (
            serde_json::json!({"resource": {"type": "global"}, "textPayload": "x"}),
            "log_name",
        ),
        (
            serde_json::json!({"logName": "projects/p/logs/a", "textPayload": "x"}),
            "resource",
        ),
    ] {
        let (status, reply) = logging_rest(&env, "write", serde_json::json!({"entries": [entry]})).await;
        assert_eq!(status, 400, "{reply}");
        assert!(reply.to_string().contains(says), "{reply}");
    }
}
