//! Which log streams an object has: read from its spec and status with the caller's kubeconfig.

use kube::ResourceExt;
use tpu_operator_api::{
    accelerator::parse_accelerator_type,
    preprocess_batch::{PreprocessBatch, PreprocessBatchPhase},
    tpu_slice::{TpuSlice, TpuSlicePhase},
    training_pipeline::{StageName, TrainingPipeline, TrainingPipelinePhase},
};
use tpu_operator_gcp::logging::{
    LogSource,
    sources::{ATTEMPT_LABEL, HOST_LABEL, PIPELINE_LABEL, SLICE_LABEL, node_parts},
};

use super::{LogsArgs, Stage};
use crate::object::{Kind, Object};

/// One stream of log entries.
#[derive(Clone, Debug, PartialEq)]
pub struct Stream {
    /// Shown before each line when more than one stream prints (`preprocess`, `train`).
    pub prefix: Option<&'static str>,
    /// What it is, for messages ("the Dataproc batch projects/…").
    pub what: String,
    pub source: LogSource,
    /// Several hosts write it: each line says which (`[train w1]`).
    pub hosts: bool,
}

/// An object's streams now.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    pub streams: Vec<Stream>,
    /// Why a stream the object will have is not there yet.
    pub notes: Vec<String>,
    /// The object finished: no new lines are coming.
    pub finished: bool,
}

pub async fn resolve(
    client: &kube::Client,
    namespace: &str,
    object: &Object,
    args: &LogsArgs,
) -> anyhow::Result<Resolved> {
    match object.kind {
        Kind::TrainingPipeline => Ok(pipeline(&object.get(client, namespace).await?, args)),
        Kind::TpuSlice => slice_streams(&object.get(client, namespace).await?, args),
        Kind::PreprocessBatch => batch(&object.get(client, namespace).await?, args),
    }
}

/// The workload container's labels: these, and the host when one is asked for.
fn workload(project: String, mut labels: Vec<(&'static str, String)>, host: Option<u32>) -> LogSource {
    if let Some(h) = host {
        labels.push((HOST_LABEL, h.to_string()));
    }
    LogSource::Workload { project, labels }
}

fn pipeline(tp: &TrainingPipeline, args: &LogsArgs) -> Resolved {
    let st = tp.status.clone().unwrap_or_default();
    let stage_of = |n: StageName| st.stages.iter().find(|s| s.name == n);
    let mut r = Resolved {
        finished: matches!(
            st.phase,
            TrainingPipelinePhase::Succeeded | TrainingPipelinePhase::Failed
        ),
        ..Resolved::default()
    };
    let want = |s: Stage| args.stage.is_none_or(|x| x == s);
    if want(Stage::Preprocess) && tp.spec.preprocess.is_some() {
        match stage_of(StageName::Preprocess)
            .and_then(|s| s.gcp_name.as_deref())
            .and_then(|n| LogSource::dataproc_batch(n).map(|src| (n, src)))
        {
            Some((n, source)) => r.streams.push(Stream {
                prefix: Some("preprocess"),
                what: format!("the Dataproc batch {n}"),
                source,
                hosts: false,
            }),
            None => r.notes.push("preprocess: no Dataproc batch yet".into()),
        }
    }
    if want(Stage::Train) {
        match train_stream(tp, &st, args) {
            Ok(stream) => r.streams.push(stream),
            Err(note) => r.notes.push(format!("train: {note}")),
        }
    }
    // Both stages print (now or later, when following): each line says which it is.
    if args.stage.is_some() || tp.spec.preprocess.is_none() {
        r.streams.iter_mut().for_each(|s| s.prefix = None);
    }
    r
}

fn train_stream(
    tp: &TrainingPipeline,
    st: &tpu_operator_api::training_pipeline::TrainingPipelineStatus,
    args: &LogsArgs,
) -> Result<Stream, String> {
    let attempt = args.attempt.map_or(st.attempts, |a| a as i32);
    if attempt <= 0 {
        return Err("training has not started".into());
    }
    if let Some(tpu_vm) = &tp.spec.training.tpu_vm {
        let from_node = st
            .stages
            .iter()
            .find(|s| s.name == StageName::Train)
            .and_then(|s| s.gcp_name.as_deref())
            .and_then(node_parts)
            .map(|(p, _)| p);
        let project = tpu_vm
            .slice
            .project
            .clone()
            .or_else(|| tp.spec.project.clone())
            .or(from_node)
            .ok_or("its project is not known yet (no node was created)")?;
        let uid = tp.uid().ok_or("the pipeline has no uid")?;
        let labels = vec![(PIPELINE_LABEL, uid), (ATTEMPT_LABEL, attempt.to_string())];
        return Ok(Stream {
            prefix: Some("train"),
            what: format!("the training container of attempt {attempt}"),
            source: workload(project, labels, args.host),
            hosts: multi_host(st.accelerator_type.as_deref()) && args.host.is_none(),
        });
    }
    if args.host.is_some() {
        return Err(
            "--host applies to TPU VM training (a Vertex AI job logs all replicas as one job)".into(),
        );
    }
    if attempt != st.attempts {
        return Err(format!(
            "only the current attempt's ({}) Vertex AI job is recorded in status; find attempt {attempt}'s with \
             gcloud ai custom-jobs list --filter='labels.{ATTEMPT_LABEL}={attempt}'",
            st.attempts
        ));
    }
    let name = st
        .custom_job_name
        .as_deref()
        .ok_or("no Vertex AI custom job yet")?;
    let source = LogSource::vertex_job(name).ok_or_else(|| format!("{name:?} is not a custom job name"))?;
    Ok(Stream {
        prefix: Some("train"),
        what: format!("the Vertex AI custom job {name}"),
        source,
        hosts: false,
    })
}

/// A slice of this accelerator type has several hosts, each running the container (so does one
/// whose type is not known yet, to be safe).
fn multi_host(accelerator_type: Option<&str>) -> bool {
    accelerator_type
        .and_then(|t| parse_accelerator_type(t).ok())
        .is_none_or(|shape| shape.hosts > 1)
}

fn slice_streams(slice: &TpuSlice, args: &LogsArgs) -> anyhow::Result<Resolved> {
    let st = slice.status.clone().unwrap_or_default();
    let node = st.node_name.as_deref().and_then(node_parts);
    let project = slice
        .spec
        .project
        .clone()
        .or_else(|| node.clone().map(|(p, _)| p));
    let mut r = Resolved {
        finished: st.phase == TpuSlicePhase::Failed,
        ..Resolved::default()
    };
    let multi_host = st.hosts.is_none_or(|h| h > 1);
    let Some(project) = project else {
        r.notes.push("no node yet (its project is not known)".into());
        return Ok(r);
    };
    if slice.spec.startup_script.is_none() && slice.spec.workload.is_some() {
        let uid = slice.uid().unwrap_or_default();
        r.streams.push(Stream {
            prefix: None,
            what: format!("the workload of TpuSlice {}", slice.name_any()),
            source: workload(project, vec![(SLICE_LABEL, uid)], args.host),
            hosts: multi_host && args.host.is_none(),
        });
        return Ok(r);
    }
    if args.host.is_some() {
        anyhow::bail!(
            "--host: this slice runs its own startupScript, whose hosts' logs are not labelled by host"
        );
    }
    match node {
        Some((project, node_id)) => r.streams.push(Stream {
            prefix: None,
            what: format!("the TPU VM hosts of node {node_id}"),
            source: LogSource::TpuWorker { project, node_id },
            hosts: multi_host,
        }),
        None => r.notes.push("no node yet".into()),
    }
    Ok(r)
}

fn batch(b: &PreprocessBatch, args: &LogsArgs) -> anyhow::Result<Resolved> {
    let st = b.status.clone().unwrap_or_default();
    let mut all: Vec<String> = st.previous_batches.clone();
    all.extend(st.batch_name.clone());
    let mut r = Resolved {
        finished: matches!(
            st.phase,
            PreprocessBatchPhase::Succeeded | PreprocessBatchPhase::Failed | PreprocessBatchPhase::Cancelled
        ),
        ..Resolved::default()
    };
    let chosen =
        match args.attempt {
            Some(a) => Some(all.get(a as usize - 1).ok_or_else(|| {
                anyhow::anyhow!("--attempt {a}: the batch has made {} attempt(s)", all.len())
            })?),
            None => all.last(),
        };
    match chosen.and_then(|n| LogSource::dataproc_batch(n).map(|s| (n, s))) {
        Some((n, source)) => r.streams.push(Stream {
            prefix: None,
            what: format!("the Dataproc batch {n}"),
            source,
            hosts: false,
        }),
        None => r.notes.push("no Dataproc batch yet".into()),
    }
    Ok(r)
}
