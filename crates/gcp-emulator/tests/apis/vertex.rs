//! Vertex AI v1 custom jobs against the emulator, through Google's official Rust client
//! (`google-cloud-aiplatform-v1` with only the `job-service` feature).

use crate::common;

use common::*;
use gcp_emulator::{Code, Fault};
use google_cloud_aiplatform_v1::model::{
    AcceleratorType, ContainerSpec, CustomJob, CustomJobSpec, GcsDestination, JobState, MachineSpec,
    WorkerPoolSpec,
};
use google_cloud_gax::paginator::ItemPaginator as _;
use google_cloud_lro::Poller;
use reqwest::Method;
use serde_json::json;

const PARENT: &str = "projects/p/locations/us-central1";

fn job(display: &str, out: &str) -> CustomJob {
    CustomJob::new()
        .set_display_name(display)
        .set_labels([("owner", "op"), ("k8s-uid", "1234-abcd")])
        .set_job_spec(
            CustomJobSpec::new()
                .set_worker_pool_specs([WorkerPoolSpec::new()
                    .set_machine_spec(
                        MachineSpec::new()
                            .set_machine_type("ct5lp-hightpu-4t")
                            .set_accelerator_type(AcceleratorType::TpuV5Litepod)
                            .set_accelerator_count(4)
                            .set_tpu_topology("2x2"),
                    )
                    .set_replica_count(1)
                    .set_container_spec(
                        ContainerSpec::new().set_image_uri("us-docker.pkg.dev/p/r/trainer:1"),
                    )])
                .set_base_output_directory(GcsDestination::new().set_output_uri_prefix(out)),
        )
}

async fn get(c: &google_cloud_aiplatform_v1::client::JobService, name: &str) -> CustomJob {
    c.get_custom_job().set_name(name).send().await.unwrap()
}

#[tokio::test]
async fn job_runs_through_every_state_and_writes_the_model() {
    let emu = emulator().await;
    let mut cfg = emu.config();
    cfg.durations.job_queued = secs(5);
    emu.set_config(cfg);
    let vx = vertex(&emu).await;
    let j = vx
        .create_custom_job()
        .set_parent(PARENT)
        .set_custom_job(job("train-1", "gs://models/run-1/"))
        .send()
        .await
        .unwrap();
    let number = emu.config().project_number("p");
    assert!(
        j.name
            .starts_with(&format!("projects/{number}/locations/us-central1/customJobs/")),
        "{}",
        j.name
    );
    assert!(
        j.name
            .rsplit('/')
            .next()
            .unwrap()
            .chars()
            .all(|c| c.is_ascii_digit())
    );
    assert_eq!(j.state, JobState::Queued);
    assert!(j.create_time.is_some() && j.update_time.is_some());
    let disk = j.job_spec.as_ref().unwrap().worker_pool_specs[0]
        .disk_spec
        .clone()
        .unwrap();
    assert_eq!(
        (disk.boot_disk_type.as_str(), disk.boot_disk_size_gb),
        ("pd-ssd", 100)
    );
    emu.clock().advance(secs(5));
    assert_eq!(get(&vx, &j.name).await.state, JobState::Pending);
    emu.clock().advance(secs(60));
    let running = get(&vx, &j.name).await;
    assert_eq!(running.state, JobState::Running);
    assert!(running.start_time.is_some() && running.end_time.is_none());
    // Lookups by project id work too (names carry the number).
    let by_id = j.name.replace(&format!("projects/{number}"), "projects/p");
    assert_eq!(get(&vx, &by_id).await.name, j.name);
    emu.clock().advance(secs(300));
    let done = get(&vx, &j.name).await;
    assert_eq!(done.state, JobState::Succeeded);
    assert!(done.end_time.is_some());
    // While it ran (300 s) the simulated training checkpointed every 120 s under Vertex's
    // AIP_CHECKPOINT_DIR (<baseOutputDirectory>/checkpoints/), then wrote the model.
    assert_eq!(
        emu.objects("models")
            .into_iter()
            .map(|o| o.name)
            .collect::<Vec<_>>(),
        vec![
            "run-1/checkpoints/100/_CHECKPOINT_METADATA",
            "run-1/checkpoints/100/state/checkpoint",
            "run-1/checkpoints/200/_CHECKPOINT_METADATA",
            "run-1/checkpoints/200/state/checkpoint",
            "run-1/model/saved_model.pb"
        ]
    );

    let _t = ticker(emu.clock(), secs(1));
    vx.delete_custom_job()
        .set_name(&j.name)
        .poller()
        .until_done()
        .await
        .expect("delete LRO");
    let err = vx.get_custom_job().set_name(&j.name).send().await.unwrap_err();
    assert_eq!(code(&err), "NotFound");
}

/// Issue 24: the shapes the Vertex guides use (a Python package, web access, a TensorBoard with
/// its service account, restarts) are accepted; the job's training checkpoints under the
/// CHECKPOINT_DIR of its environment while it runs; a TensorBoard without a service account is
/// refused.
#[tokio::test]
async fn python_package_tensorboard_web_access_and_checkpoints() {
    use google_cloud_aiplatform_v1::model::{EnvVar, PythonPackageSpec, Scheduling};
    let emu = emulator().await;
    let vx = vertex(&emu).await;
    let package = |tensorboard: &str, service_account: &str| {
        let mut j = job("pkg", "gs://models/run-2/");
        let spec = j.job_spec.take().unwrap();
        let mut pool = spec.worker_pool_specs[0].clone();
        pool = pool.set_python_package_spec(
            PythonPackageSpec::new()
                .set_executor_image_uri("us-docker.pkg.dev/vertex-ai/training/tf-tpu.2-17.cp310:latest")
                .set_package_uris(["gs://models/trainer-0.1.tar.gz"])
                .set_python_module("trainer.task")
                .set_env([EnvVar::new()
                    .set_name("CHECKPOINT_DIR")
                    .set_value("gs://models/ckpt/")]),
        );
        j.set_job_spec(
            spec.set_worker_pool_specs([pool])
                .set_enable_web_access(true)
                .set_tensorboard(tensorboard)
                .set_service_account(service_account)
                .set_scheduling(Scheduling::new().set_restart_job_on_worker_restart(true)),
        )
    };
    let tb = "projects/p/locations/us-central1/tensorboards/123";
    let err = vx
        .create_custom_job()
        .set_parent(PARENT)
        .set_custom_job(package(tb, ""))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidArgument", "{err}");
    assert!(err.to_string().contains("service_account"), "{err}");
    let j = vx
        .create_custom_job()
        .set_parent(PARENT)
        .set_custom_job(package(tb, "trainer@p.iam.gserviceaccount.com"))
        .send()
        .await
        .unwrap();
    let spec = j.job_spec.as_ref().unwrap();
    assert!(spec.enable_web_access);
    assert_eq!(spec.tensorboard, tb);
    assert!(spec.scheduling.as_ref().unwrap().restart_job_on_worker_restart);
    emu.clock().advance(secs(60));
    assert_eq!(get(&vx, &j.name).await.state, JobState::Running);
    emu.clock().advance(secs(250));
    let ckpts = |emu: &gcp_emulator::Emulator| {
        emu.objects("models")
            .into_iter()
            .filter(|o| o.name.starts_with("ckpt/") && o.name.ends_with("_CHECKPOINT_METADATA"))
            .count()
    };
    assert_eq!(ckpts(&emu), 2, "checkpoints at 120 s and 240 s of the run");
    emu.clock().advance(secs(100));
    assert_eq!(get(&vx, &j.name).await.state, JobState::Succeeded);
    assert_eq!(ckpts(&emu), 2, "none after the run ended at 360 s");
    // The environment's CHECKPOINT_DIR, not AIP_CHECKPOINT_DIR, is where it checkpointed.
    assert!(
        emu.objects("models")
            .iter()
            .all(|o| !o.name.starts_with("run-2/checkpoints/"))
    );
}

#[tokio::test]
async fn cancel_failures_delete_rules_and_bad_names() {
    let emu = emulator().await;
    let vx = vertex(&emu).await;
    let j = vx
        .create_custom_job()
        .set_parent(PARENT)
        .set_custom_job(job("c", "gs://m/c/"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        j.state,
        JobState::Pending,
        "zero queueing time: PENDING on return, as on the real service"
    );
    let err = vx.delete_custom_job().set_name(&j.name).send().await.unwrap_err();
    assert_eq!(
        (code(&err).as_str(), http_status(&err)),
        ("FailedPrecondition", 400)
    );
    vx.cancel_custom_job().set_name(&j.name).send().await.unwrap();
    assert_eq!(get(&vx, &j.name).await.state, JobState::Cancelling);
    emu.clock().advance(secs(30));
    let c = get(&vx, &j.name).await;
    assert_eq!(c.state, JobState::Cancelled);
    assert_eq!(c.error.as_ref().unwrap().code, 1);
    let err = vx.cancel_custom_job().set_name(&j.name).send().await.unwrap_err();
    assert_eq!(code(&err), "FailedPrecondition");
    let op = vx.delete_custom_job().set_name(&j.name).send().await.unwrap();
    assert!(op.done);
    let got = vx.get_operation().set_name(&op.name).send().await.unwrap();
    assert!(got.done);
    let ops = vx.list_operations().set_name(PARENT).send().await.unwrap();
    assert_eq!(ops.operations.len(), 1);
    assert!(vx.wait_operation().set_name(&op.name).send().await.unwrap().done);
    vx.cancel_operation().set_name(&op.name).send().await.unwrap();
    vx.delete_operation().set_name(&op.name).send().await.unwrap();
    assert_eq!(
        code(&vx.get_operation().set_name(&op.name).send().await.unwrap_err()),
        "NotFound"
    );
    assert!(emu.objects("m").is_empty());

    let f = vx
        .create_custom_job()
        .set_parent(PARENT)
        .set_custom_job(job("f", "gs://m/f/"))
        .send()
        .await
        .unwrap();
    emu.inject(Fault::FailJob {
        name: f.name.rsplit('/').next().unwrap().into(),
        message: None,
    })
    .unwrap();
    let failed = get(&vx, &f.name).await;
    assert_eq!(failed.state, JobState::Failed);
    assert_eq!(failed.error.as_ref().unwrap().code, 13);
    let s = vx
        .create_custom_job()
        .set_parent(PARENT)
        .set_custom_job(job("s", "gs://m/s/"))
        .send()
        .await
        .unwrap();
    emu.inject(Fault::SuppressOutput { name: s.name.clone() })
        .unwrap();
    emu.clock().advance(secs(400));
    assert_eq!(get(&vx, &s.name).await.state, JobState::Succeeded);
    assert!(emu.objects("m").is_empty(), "succeeded without output");

    let err = vx
        .get_custom_job()
        .set_name(format!("{PARENT}/customJobs/customjob-x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidArgument");
    assert_eq!(
        err.status().unwrap().message,
        "List of found errors:\t1.Field: name; Message: Invalid CustomJob resource name.\t"
    );

    emu.inject(Fault::FailCalls {
        service: "vertex".into(),
        method: "customJobs.create".into(),
        count: 1,
        code: Code::PermissionDenied,
        message: None,
    })
    .unwrap();
    let err = vx
        .create_custom_job()
        .set_parent(PARENT)
        .set_custom_job(job("x", "gs://m/x/"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (code(&err).as_str(), http_status(&err)),
        ("PermissionDenied", 403)
    );
}

#[tokio::test]
async fn list_filters_paging_and_read_mask() {
    let emu = emulator().await;
    let vx = vertex(&emu).await;
    let mut names = vec![];
    for (i, (display, team)) in [("my_job_1", "a"), ("my_job_2", "b"), ("other", "a")]
        .iter()
        .enumerate()
    {
        let mut j = job(display, "gs://m/x/");
        j.labels.insert("team".into(), team.to_string());
        if i == 2 {
            j.labels.insert("special".into(), "".into());
        }
        names.push(
            vx.create_custom_job()
                .set_parent(PARENT)
                .set_custom_job(j)
                .send()
                .await
                .unwrap()
                .name,
        );
        emu.clock().advance(secs(20));
    }
    // Now t=60: job 0 RUNNING (created at 0, pending for 60s), jobs 1 and 2 still PENDING.
    let list = |f: &str| {
        let (vx, f) = (vx.clone(), f.to_string());
        async move {
            let r = vx
                .list_custom_jobs()
                .set_parent(PARENT)
                .set_filter(f)
                .send()
                .await
                .unwrap();
            r.custom_jobs
                .into_iter()
                .map(|j| j.display_name)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(list("").await, vec!["other", "my_job_2", "my_job_1"]);
    assert_eq!(list("labels.team=a").await, vec!["other", "my_job_1"]);
    assert_eq!(list("labels.team=\"b\"").await, vec!["my_job_2"]);
    assert_eq!(list("labels.special:*").await, vec!["other"]);
    assert_eq!(list("labels.k8s-uid=\"1234-abcd\"").await.len(), 3);
    assert_eq!(list("state=\"JOB_STATE_RUNNING\"").await, vec!["my_job_1"]);
    assert_eq!(
        list("state!=JOB_STATE_RUNNING AND display_name:\"my_job_*\"").await,
        vec!["my_job_2"]
    );
    assert_eq!(
        list("NOT display_name=\"other\"").await,
        vec!["my_job_2", "my_job_1"]
    );
    assert_eq!(
        list("create_time>\"2026-01-01T00:00:15Z\"").await,
        vec!["other", "my_job_2"]
    );
    let e = vx
        .list_custom_jobs()
        .set_parent(PARENT)
        .set_filter("machine=x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidArgument");
    let page = vx
        .list_custom_jobs()
        .set_parent(PARENT)
        .set_page_size(2)
        .send()
        .await
        .unwrap();
    assert_eq!(
        (page.custom_jobs.len(), page.next_page_token.is_empty()),
        (2, false)
    );
    let mut all = vx
        .list_custom_jobs()
        .set_parent(PARENT)
        .set_page_size(1)
        .by_item();
    let mut n = 0;
    while let Some(j) = all.next().await {
        j.unwrap();
        n += 1;
    }
    assert_eq!(n, 3);
    let masked = vx
        .list_custom_jobs()
        .set_parent(PARENT)
        .set_read_mask(google_cloud_wkt::FieldMask::default().set_paths(["name", "state"]))
        .send()
        .await
        .unwrap();
    assert!(
        masked
            .custom_jobs
            .iter()
            .all(|j| j.display_name.is_empty() && !j.name.is_empty())
    );
}

#[tokio::test]
async fn wire_format_and_validation() {
    let emu = emulator().await;
    let base = format!("{}/vertex/v1/{PARENT}/customJobs", emu.url());
    let good = json!({"displayName": "j1", "jobSpec": {"workerPoolSpecs": [{"containerSpec": {"imageUri": "i"},
        "machineSpec": {"machineType": "ct5lp-hightpu-4t", "acceleratorType": 12, "acceleratorCount": 4, "tpuTopology": "2x2"},
        "replicaCount": "1"}], "scheduling": {"timeout": "7200s", "strategy": 4}}});
    let (s, j) = raw(
        Method::POST,
        &format!("{base}?%24alt=json%3Benum-encoding%3Dint"),
        Some(good.clone()),
    )
    .await;
    assert_eq!(s, 200, "{j}");
    assert_eq!(j["state"], 2);
    assert_eq!(
        j["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"],
        12
    );
    assert_eq!(j["jobSpec"]["scheduling"]["strategy"], 4);
    assert_eq!(j["jobSpec"]["workerPoolSpecs"][0]["replicaCount"], "1");
    let (_, named) = raw(
        Method::GET,
        &format!("{}/vertex/v1/{}", emu.url(), j["name"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(named["state"], "JOB_STATE_PENDING");
    assert_eq!(named["jobSpec"]["scheduling"]["strategy"], "SPOT");
    let bad = [
        (
            json!({"jobSpec": good["jobSpec"].clone()}),
            "custom_job.display_name",
        ),
        (
            json!({"displayName": "x", "jobSpec": {"workerPoolSpecs": []}}),
            "custom_job.job_spec.worker_pool_specs",
        ),
        (
            json!({"displayName": "x", "jobSpec": {"workerPoolSpecs": [{"replicaCount": "1", "containerSpec": {"imageUri": "i"}}]}}),
            "machine_type",
        ),
        (
            json!({"displayName": "x", "labels": {"UPPER": "v"}, "jobSpec": good["jobSpec"].clone()}),
            "custom_job.labels",
        ),
        (
            json!({"displayName": "x", "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "m", "acceleratorType": "TPU_V9"}}]}}),
            "accelerator_type",
        ),
        (
            json!({"displayName": "x", "jobSpec": {"scheduling": {"timeout": "7200"}, "workerPoolSpecs": []}}),
            "custom_job.job_spec.scheduling.timeout",
        ),
    ];
    for (body, needle) in bad {
        let (s, e) = raw(Method::POST, &base, Some(body)).await;
        assert_eq!(
            (s, e["error"]["status"].as_str()),
            (400, Some("INVALID_ARGUMENT")),
            "{e}"
        );
        assert!(
            e["error"]["message"].as_str().unwrap().contains(needle),
            "{needle} not in {e}"
        );
    }
}
