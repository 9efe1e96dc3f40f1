//! Mapping the pipeline spec to what it creates: the owned `PreprocessBatch` and `TpuSlice`
//! children and the Vertex AI `CustomJob` request.
//!
//! Does not touch Kubernetes or Google Cloud.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;
use tpu_operator_api::{
    accelerator::{VertexAcceleratorType, VertexMachineType},
    common::DeletionPolicy,
    duration::parse_duration,
    naming::{self, ObjectIdentity},
    preprocess_batch::{PreprocessBatch, PreprocessBatchSpec},
    tpu_slice::{TpuSlice, TpuSliceSpec},
    training_pipeline::{SchedulingStrategy, TrainingPipelineSpec, VertexTraining},
};
use tpu_operator_gcp::{aiplatform_v1::model as vx, wkt};

use super::expand::Vars;

/// The training slice's completion annotation (the TpuSlice controller copies it into the node
/// metadata key `tpu-operator-done-uri`, which users cannot set themselves: admission reserves
/// `tpu-operator-*` metadata keys).
use tpu_operator_api::{
    tpu_slice::DONE_URI_ANNOTATION,
    training_pipeline::{ATTEMPT_LABEL, PIPELINE_LABEL},
};

fn child_meta(name: &str, ns: &str, pipeline: &str, owner: OwnerReference) -> ObjectMeta {
    child_meta_with(name, ns, pipeline, owner, BTreeMap::new())
}

/// [`child_meta`] with more labels.
fn child_meta_with(
    name: &str,
    ns: &str,
    pipeline: &str,
    owner: OwnerReference,
    mut labels: BTreeMap<String, String>,
) -> ObjectMeta {
    labels.insert(PIPELINE_LABEL.to_string(), pipeline.to_string());
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(ns.to_string()),
        owner_references: Some(vec![owner]),
        labels: Some(labels),
        ..Default::default()
    }
}

/// Children inherit `deletionPolicy: Orphan` from the pipeline, so orphaning a pipeline orphans
/// the cloud resources of its children too.
/// Whether the training slice is made with `deletionPolicy: Orphan`.
pub fn orphans_slice(spec: &TrainingPipelineSpec) -> bool {
    let own = spec
        .training
        .tpu_vm
        .as_ref()
        .map_or(DeletionPolicy::Delete, |t| t.slice.deletion_policy);
    child_policy(spec.deletion_policy, own) == DeletionPolicy::Orphan
}

fn child_policy(pipeline: DeletionPolicy, own: DeletionPolicy) -> DeletionPolicy {
    match pipeline {
        DeletionPolicy::Orphan => DeletionPolicy::Orphan,
        DeletionPolicy::Delete => own,
    }
}

/// The `<name>-preprocess` batch: the template with artifact variables expanded, project and
/// region from the pipeline, declared output defaulting to `artifacts.processedData`.
pub fn preprocess_batch(
    spec: &TrainingPipelineSpec,
    id: &ObjectIdentity,
    name: &str,
    project: Option<String>,
    owner: OwnerReference,
) -> Option<PreprocessBatch> {
    let template = spec.preprocess.as_ref()?;
    let mut batch = Vars::from_artifacts(&spec.artifacts).batch(template);
    if batch.output_uri.is_none() {
        batch.output_uri = spec.artifacts.processed_data.clone();
    }
    Some(PreprocessBatch {
        metadata: child_meta(name, &id.namespace, &id.name, owner),
        spec: PreprocessBatchSpec {
            project,
            region: spec.region.clone(),
            batch,
            deletion_policy: spec.deletion_policy,
        },
        status: None,
    })
}

/// The `<name>-train` slice of `attempt` running the training container as its workload, with
/// `CHECKPOINT_DIR` set to `checkpoint_dir` (the attempt's; the slice keeps it across the
/// recreations after a preemption, which are the TpuSlice's own). The attempt label names the
/// attempt in the workload's log entries.
pub fn train_slice(
    spec: &TrainingPipelineSpec,
    id: &ObjectIdentity,
    name: &str,
    project: Option<String>,
    owner: OwnerReference,
    checkpoint_dir: &str,
    attempt: i32,
) -> Option<TpuSlice> {
    let tpu_vm = spec.training.tpu_vm.as_ref()?;
    let labels = BTreeMap::from([(ATTEMPT_LABEL.to_string(), attempt.to_string())]);
    let mut meta = child_meta_with(name, &id.namespace, &id.name, owner, labels);
    meta.annotations = Some(BTreeMap::from([(
        DONE_URI_ANNOTATION.to_string(),
        spec.artifacts.model_dir.clone(),
    )]));
    let slice: TpuSliceSpec = tpu_vm.slice.clone();
    Some(TpuSlice {
        metadata: meta,
        spec: TpuSliceSpec {
            project: slice.project.clone().or(project),
            startup_script: None,
            workload: Some(
                Vars::from_artifacts(&spec.artifacts)
                    .with_checkpoint_dir(checkpoint_dir)
                    .container(&tpu_vm.container),
            ),
            deletion_policy: child_policy(spec.deletion_policy, slice.deletion_policy),
            ..slice
        },
        status: None,
    })
}

fn proto_duration(field: &str, value: &str) -> Result<wkt::Duration, String> {
    let d = parse_duration(value).map_err(|e| format!("{field}: {e:?}"))?;
    wkt::Duration::try_from(d).map_err(|e| format!("{field}: {e}"))
}

fn accelerator(t: VertexAcceleratorType) -> vx::AcceleratorType {
    match t {
        VertexAcceleratorType::TPU_V2 => vx::AcceleratorType::TpuV2,
        VertexAcceleratorType::TPU_V3 => vx::AcceleratorType::TpuV3,
        VertexAcceleratorType::TPU_V4_POD => vx::AcceleratorType::TpuV4Pod,
        VertexAcceleratorType::TPU_V5_LITEPOD => vx::AcceleratorType::TpuV5Litepod,
    }
}

/// `acceleratorCount` to send with an `acceleratorType`. `cloud-tpu` is sized by it (8 cores).
/// A `ct5lp-hightpu-<N>t` machine has N chips whatever the topology (which spans several such
/// machines), so the count is N (Vertex "Configure compute resources for training",
/// https://cloud.google.com/vertex-ai/docs/training/configure-compute, TPU v5e machine types):
/// the spec may leave it out or repeat it, anything else is refused here
/// rather than by Vertex.
fn accelerator_count(v: &VertexTraining) -> Result<i32, String> {
    if v.machine_type == VertexMachineType::CloudTpu {
        return Ok(v.accelerator_count.unwrap_or(8));
    }
    let chips = v.machine_type.info().chips_per_host as i32;
    match v.accelerator_count {
        None => Ok(chips),
        Some(n) if n == chips => Ok(chips),
        Some(n) => Err(format!(
            "spec.training.vertex.acceleratorCount: machine type {} has {chips} TPU chip(s) whatever the topology; leave acceleratorCount unset or set it to {chips} (got {n})",
            v.machine_type.as_str()
        )),
    }
}

fn machine_spec(v: &VertexTraining) -> Result<vx::MachineSpec, String> {
    let mut m = vx::MachineSpec::new().set_machine_type(v.machine_type.as_str());
    if v.machine_type != VertexMachineType::CloudTpu
        && let Some(t) = &v.tpu_topology
    {
        m = m.set_tpu_topology(t.clone());
    }
    if let Some(t) = v.accelerator_type {
        m = m
            .set_accelerator_type(accelerator(t))
            .set_accelerator_count(accelerator_count(v)?);
    }
    Ok(m)
}

/// `scheduling.timeout` when the spec sets none: Vertex's own default is 7 days ("The maximum
/// job running time. The default is 7 days.", aiplatform v1 `Scheduling.timeout`), so a hung
/// job would bill for a week; a day covers the recipe's runs and users set more when needed.
pub const DEFAULT_VERTEX_TIMEOUT: &str = "24h";

fn scheduling(v: &VertexTraining) -> Result<Option<vx::Scheduling>, String> {
    let Some(s) = &v.scheduling else {
        let timeout = proto_duration("spec.training.vertex.scheduling.timeout", DEFAULT_VERTEX_TIMEOUT)?;
        return Ok(Some(vx::Scheduling::new().set_timeout(timeout)));
    };
    let strategy = match s.strategy {
        SchedulingStrategy::Standard => vx::scheduling::Strategy::Standard,
        SchedulingStrategy::Spot => vx::scheduling::Strategy::Spot,
        SchedulingStrategy::FlexStart => vx::scheduling::Strategy::FlexStart,
    };
    let timeout = proto_duration(
        "spec.training.vertex.scheduling.timeout",
        s.timeout.as_deref().unwrap_or(DEFAULT_VERTEX_TIMEOUT),
    )?;
    let max_wait = s
        .max_wait_duration
        .as_deref()
        .map(|t| proto_duration("spec.training.vertex.scheduling.maxWaitDuration", t))
        .transpose()?;
    Ok(Some(
        vx::Scheduling::new()
            .set_strategy(strategy)
            .set_restart_job_on_worker_restart(s.restart_job_on_worker_restart)
            .set_timeout(timeout)
            .set_or_clear_max_wait_duration(max_wait),
    ))
}

/// The Vertex custom job of one training attempt, with `CHECKPOINT_DIR` set to
/// `checkpoint_dir` in its environment. `Err` names the spec field that cannot be mapped
/// (admission normally refuses it first).
pub fn custom_job(
    spec: &TrainingPipelineSpec,
    id: &ObjectIdentity,
    cluster_id: &str,
    attempt: i32,
    checkpoint_dir: &str,
) -> Result<vx::CustomJob, String> {
    let v = spec
        .training
        .vertex
        .as_ref()
        .ok_or("spec.training.vertex is not set")?;
    let vars = Vars::from_artifacts(&spec.artifacts).with_checkpoint_dir(checkpoint_dir);
    let job_spec = vx::CustomJobSpec::new()
        .set_worker_pool_specs([worker_pool(v, &vars)?])
        .set_or_clear_scheduling(scheduling(v)?)
        .set_service_account(v.service_account.clone().unwrap_or_default())
        .set_network(v.network.clone().unwrap_or_default())
        .set_tensorboard(v.tensorboard.clone().unwrap_or_default())
        .set_enable_web_access(v.enable_web_access)
        .set_base_output_directory(
            vx::GcsDestination::new().set_output_uri_prefix(spec.artifacts.model_dir.clone()),
        );
    if let Some(key) = v.labels.keys().find(|k| reserved_label(k)) {
        return Err(format!(
            "spec.training.vertex.labels: {key} is one of the operator's identity labels (managed-by, tpu-operator-*): rename it"
        ));
    }
    // User labels first, the identity labels over them (admission refuses a collision already).
    let mut labels = naming::object_labels(&v.labels, id, cluster_id);
    labels.insert(ATTEMPT_LABEL.to_string(), attempt.to_string());
    Ok(vx::CustomJob::new()
        .set_display_name(naming::vertex_display_name(id))
        .set_labels(labels)
        .set_job_spec(job_spec))
}

/// The job's one worker pool: the workload (a container or a Python package, with the
/// pipeline's variables expanded), the machine, the replica count and the boot disk.
fn worker_pool(v: &VertexTraining, vars: &Vars) -> Result<vx::WorkerPoolSpec, String> {
    let env = |env: &[tpu_operator_api::common::EnvVar]| {
        vars.env(env)
            .into_iter()
            .map(|e| vx::EnvVar::new().set_name(e.name).set_value(e.value))
            .collect::<Vec<_>>()
    };
    let pool = vx::WorkerPoolSpec::new();
    let mut pool = match (&v.container, &v.python_package_spec) {
        (Some(container), None) => {
            let c = vars.container(container);
            pool.set_container_spec(
                vx::ContainerSpec::new()
                    .set_image_uri(c.image)
                    .set_command(c.command)
                    .set_args(c.args)
                    .set_env(env(&container.env)),
            )
        }
        (None, Some(p)) => pool.set_python_package_spec(
            vx::PythonPackageSpec::new()
                .set_executor_image_uri(p.executor_image_uri.clone())
                .set_package_uris(p.package_uris.clone())
                .set_python_module(p.python_module.clone())
                .set_args(vars.args(&p.args))
                .set_env(env(&p.env)),
        ),
        _ => {
            return Err("spec.training.vertex: set exactly one of container and pythonPackageSpec".into());
        }
    };
    pool = pool
        .set_machine_spec(machine_spec(v)?)
        .set_replica_count(v.replica_count);
    if let Some(disk) = &v.boot_disk {
        pool = pool.set_disk_spec(disk_spec(disk));
    }
    Ok(pool)
}

/// The boot disk: its type by its API name, and its size, each when set.
fn disk_spec(disk: &tpu_operator_api::training_pipeline::BootDisk) -> vx::DiskSpec {
    let mut d = vx::DiskSpec::new();
    if let Some(t) = disk.disk_type {
        let t = serde_json::to_value(t)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        d = d.set_boot_disk_type(t);
    }
    if let Some(gb) = disk.size_gb {
        d = d.set_boot_disk_size_gb(gb);
    }
    d
}

fn reserved_label(key: &str) -> bool {
    key == naming::labels::MANAGED_BY || key.starts_with("tpu-operator-")
}

/// The Vertex list filter selecting this pipeline's jobs (optionally one attempt's).
pub fn job_filter(id: &ObjectIdentity, attempt: Option<i32>) -> String {
    let uid = naming::sanitize_label_value(&id.uid);
    let mut filter = format!(r#"labels.{}="{uid}""#, naming::labels::UID);
    if let Some(n) = attempt {
        filter.push_str(&format!(r#" AND labels.{ATTEMPT_LABEL}="{n}""#));
    }
    filter
}

/// The attempt a listed job belongs to (0 when the label is missing or garbled).
pub fn attempt_of(job: &vx::CustomJob) -> i32 {
    job.labels
        .get(ATTEMPT_LABEL)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_api::training_pipeline::TrainingPipeline;

    fn quickstart() -> TrainingPipeline {
        serde_yaml::from_str(include_str!("../../../../../examples/quickstart.yaml")).unwrap()
    }

    const CKPT: &str = "gs://demo-project-tpu-data/models/quickstart/checkpoints/";

    fn id() -> ObjectIdentity {
        ObjectIdentity::new("default", "quickstart", "0f1e2d3c-aaaa-bbbb-cccc-000000000001")
    }

    #[test]
    fn custom_job_maps_machine_container_scheduling_output_and_labels() {
        let tp = quickstart();
        let job = custom_job(&tp.spec, &id(), "c1", 2, CKPT).unwrap();
        assert_eq!(job.display_name, "default-quickstart");
        assert_eq!(
            job.labels[naming::labels::UID],
            "0f1e2d3c-aaaa-bbbb-cccc-000000000001"
        );
        assert_eq!(job.labels[ATTEMPT_LABEL], "2");
        assert_eq!(job.labels[naming::labels::CLUSTER], "c1");
        let spec = job.job_spec.unwrap();
        let pool = &spec.worker_pool_specs[0];
        let m = pool.machine_spec.as_ref().unwrap();
        assert_eq!(
            (m.machine_type.as_str(), m.tpu_topology.as_str()),
            ("ct6e-standard-4t", "2x2")
        );
        let Some(vx::worker_pool_spec::Task::ContainerSpec(c)) = &pool.task else {
            panic!("container task expected");
        };
        let env: Vec<_> = c
            .env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_str()))
            .collect();
        assert!(env.contains(&("CHECKPOINT_DIR", CKPT)), "{env:?}");
        assert_eq!(
            c.args,
            [
                "--data=gs://demo-project-tpu-data/processed/",
                "--model-dir=gs://demo-project-tpu-data/models/quickstart/",
                "--steps=1000"
            ]
        );
        let s = spec.scheduling.unwrap();
        assert_eq!(s.strategy, vx::scheduling::Strategy::Spot);
        assert_eq!(s.timeout.unwrap().seconds(), 86_400);
        assert_eq!(
            spec.base_output_directory.unwrap().output_uri_prefix,
            "gs://demo-project-tpu-data/models/quickstart/"
        );
        assert_eq!(
            spec.service_account,
            "vertex-trainer@demo-project.iam.gserviceaccount.com"
        );
    }

    /// Issue 21 item 6: without a timeout in the spec the job gets a day, not Vertex's 7 days.
    #[test]
    fn vertex_jobs_get_a_one_day_timeout_unless_the_spec_sets_one() {
        let timeout = |tp: &TrainingPipeline| {
            custom_job(&tp.spec, &id(), "c1", 1, CKPT)
                .unwrap()
                .job_spec
                .and_then(|s| s.scheduling)
                .and_then(|s| s.timeout)
                .map(|t| t.seconds())
        };
        let mut tp = quickstart();
        let v = tp.spec.training.vertex.as_mut().unwrap();
        v.scheduling.as_mut().unwrap().timeout = Some("72h".into());
        assert_eq!(timeout(&tp), Some(72 * 3600));
        let v = tp.spec.training.vertex.as_mut().unwrap();
        v.scheduling.as_mut().unwrap().timeout = None;
        assert_eq!(timeout(&tp), Some(86_400));
        tp.spec.training.vertex.as_mut().unwrap().scheduling = None;
        assert_eq!(timeout(&tp), Some(86_400));
    }

    #[test]
    fn cloud_tpu_uses_the_accelerator_enum() {
        let mut tp = quickstart();
        let v = tp.spec.training.vertex.as_mut().unwrap();
        v.machine_type = VertexMachineType::CloudTpu;
        v.tpu_topology = None;
        v.accelerator_type = Some(VertexAcceleratorType::TPU_V3);
        v.accelerator_count = Some(8);
        let job = custom_job(&tp.spec, &id(), "c1", 1, CKPT).unwrap();
        let m = job.job_spec.unwrap().worker_pool_specs[0]
            .machine_spec
            .clone()
            .unwrap();
        assert_eq!(m.accelerator_type, vx::AcceleratorType::TpuV3);
        assert_eq!((m.accelerator_count, m.tpu_topology.as_str()), (8, ""));
    }

    /// Issue 21 item 8: a `ct5lp-hightpu-<N>t` machine is sent with N chips whatever the
    /// topology (it used to get 8 for every machine type).
    #[test]
    fn ct5lp_machines_send_their_own_chip_count() {
        let mut tp = quickstart();
        let v = tp.spec.training.vertex.as_mut().unwrap();
        v.accelerator_type = Some(VertexAcceleratorType::TPU_V5_LITEPOD);
        for (machine, topology, chips) in [
            (VertexMachineType::Ct5lpHightpu1t, "1x1", 1),
            (VertexMachineType::Ct5lpHightpu4t, "2x2", 4),
            (VertexMachineType::Ct5lpHightpu4t, "4x4", 4),
            (VertexMachineType::Ct5lpHightpu8t, "2x4", 8),
        ] {
            let v = tp.spec.training.vertex.as_mut().unwrap();
            v.machine_type = machine;
            v.tpu_topology = Some(topology.into());
            v.accelerator_count = None;
            let job = custom_job(&tp.spec, &id(), "c1", 1, CKPT).unwrap();
            let m = job.job_spec.unwrap().worker_pool_specs[0]
                .machine_spec
                .clone()
                .unwrap();
            assert_eq!(m.accelerator_type, vx::AcceleratorType::TpuV5Litepod);
            assert_eq!(m.accelerator_count, chips, "{machine:?} {topology}");
        }
        let v = tp.spec.training.vertex.as_mut().unwrap();
        v.accelerator_count = Some(8);
        v.machine_type = VertexMachineType::Ct5lpHightpu4t;
        let err = custom_job(&tp.spec, &id(), "c1", 1, CKPT).unwrap_err();
        assert!(
            err.contains("acceleratorCount") && err.contains("ct5lp-hightpu-4t"),
            "{err}"
        );
    }

    /// Issue 24: the Vertex guide's shape, a Python package on a prebuilt image, with user
    /// labels next to the identity labels, web access and the attempt's CHECKPOINT_DIR.
    #[test]
    fn python_package_labels_and_web_access_map_to_the_job() {
        use tpu_operator_api::{common::EnvVar, training_pipeline::PythonPackageSpec};
        let mut tp = quickstart();
        let v = tp.spec.training.vertex.as_mut().unwrap();
        v.container = None;
        v.python_package_spec = Some(PythonPackageSpec {
            executor_image_uri: "us-docker.pkg.dev/vertex-ai/training/tf-tpu.2-17.cp310:latest".into(),
            package_uris: vec!["gs://b/trainer-0.1.tar.gz".into()],
            python_module: "trainer.task".into(),
            args: vec!["--ckpt=$(CHECKPOINT_DIR)".into()],
            env: vec![EnvVar {
                name: "DATA".into(),
                value: "$(PROCESSED_DATA)".into(),
            }],
        });
        v.labels = BTreeMap::from([("team".to_string(), "ml-platform".to_string())]);
        v.enable_web_access = true;
        let job = custom_job(&tp.spec, &id(), "c1", 3, "gs://b/ck/attempt-2/").unwrap();
        assert_eq!(job.labels["team"], "ml-platform");
        assert_eq!(job.labels[naming::labels::MANAGED_BY], "tpu-operator");
        assert_eq!(job.labels[ATTEMPT_LABEL], "3");
        let spec = job.job_spec.unwrap();
        assert!(spec.enable_web_access);
        let Some(vx::worker_pool_spec::Task::PythonPackageSpec(p)) = &spec.worker_pool_specs[0].task else {
            panic!("python package task expected");
        };
        assert_eq!(p.python_module, "trainer.task");
        assert_eq!(p.package_uris, ["gs://b/trainer-0.1.tar.gz"]);
        assert_eq!(p.args, ["--ckpt=gs://b/ck/attempt-2/"]);
        let env: Vec<_> = p
            .env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(
            env,
            [
                ("DATA", "gs://demo-project-tpu-data/processed/"),
                ("CHECKPOINT_DIR", "gs://b/ck/attempt-2/")
            ]
        );
        // An identity label key is refused, never overwritten either way.
        let v = tp.spec.training.vertex.as_mut().unwrap();
        v.labels.insert("tpu-operator-uid".into(), "forged".into());
        let err = custom_job(&tp.spec, &id(), "c1", 1, CKPT).unwrap_err();
        assert!(
            err.contains("spec.training.vertex.labels") && err.contains("tpu-operator-uid"),
            "{err}"
        );
        // Neither container nor package: the field is named.
        let v = tp.spec.training.vertex.as_mut().unwrap();
        v.labels.clear();
        v.python_package_spec = None;
        let err = custom_job(&tp.spec, &id(), "c1", 1, CKPT).unwrap_err();
        assert!(err.contains("pythonPackageSpec"), "{err}");
    }

    #[test]
    fn the_slice_workload_gets_the_attempts_checkpoint_dir() {
        let tp: TrainingPipeline =
            serde_yaml::from_str(include_str!("../../../../../examples/tpu-vm-pipeline.yaml")).unwrap();
        let owner = OwnerReference::default();
        let slice = train_slice(&tp.spec, &id(), "x-train", None, owner, "gs://b/ck/", 1).unwrap();
        let env = slice.spec.workload.unwrap().env;
        assert_eq!(
            env.iter()
                .find(|e| e.name == "CHECKPOINT_DIR")
                .map(|e| e.value.as_str()),
            Some("gs://b/ck/")
        );
    }

    #[test]
    fn filter_selects_uid_and_attempt() {
        assert_eq!(
            job_filter(&id(), Some(3)),
            r#"labels.tpu-operator-uid="0f1e2d3c-aaaa-bbbb-cccc-000000000001" AND labels.tpu-operator-attempt="3""#
        );
    }

    #[test]
    fn preprocess_child_expands_args_and_defaults_output() {
        let tp = quickstart();
        let owner = OwnerReference::default();
        let b = preprocess_batch(&tp.spec, &id(), "quickstart-preprocess", None, owner).unwrap();
        assert_eq!(
            b.spec.batch.pyspark.unwrap().args,
            [
                "--input=gs://demo-project-tpu-data/raw/",
                "--output=gs://demo-project-tpu-data/processed/"
            ]
        );
        assert_eq!(
            b.spec.batch.output_uri.as_deref(),
            Some("gs://demo-project-tpu-data/processed/")
        );
        assert_eq!(b.spec.region, "us-east5");
    }
}
