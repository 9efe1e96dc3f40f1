//! Which log streams an object has: read from its spec and status with the caller's kubeconfig.

use kube::{Api, ResourceExt};
use tpu_operator_api::{
    preprocess_batch::{PreprocessBatch, PreprocessBatchPhase},
    tpu_slice::{TpuSlice, TpuSlicePhase},
    training_pipeline::{StageName, TrainingPipeline, TrainingPipelinePhase},
};
use tpu_operator_gcp::logging::{
    LogSource,
    sources::{ATTEMPT_LABEL, HOST_LABEL, PIPELINE_LABEL, SLICE_LABEL, node_parts},
};

use super::{LogsArgs, Stage};

/// The kinds that have logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    TrainingPipeline,
    TpuSlice,
    PreprocessBatch,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::TrainingPipeline => "TrainingPipeline",
            Kind::TpuSlice => "TpuSlice",
            Kind::PreprocessBatch => "PreprocessBatch",
        }
    }
}

/// `KIND/NAME` as given.
#[derive(Clone, Debug)]
pub struct Object {
    pub kind: Kind,
    pub name: String,
}

impl Object {
    /// `KIND/NAME`, KIND as kubectl takes it: the kind, its plural or a short name, any case,
    /// optionally with the API group.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let Some((kind, name)) = text.split_once('/') else {
            anyhow::bail!("{text:?}: expected KIND/NAME, e.g. tpl/quickstart or tpuslice/my-slice");
        };
        let kind = kind.to_ascii_lowercase();
        let kind = kind.strip_suffix(".tpu-operator.dev").unwrap_or(&kind);
        let kind = match kind {
            "trainingpipeline" | "trainingpipelines" | "tpl" | "pipeline" => Kind::TrainingPipeline,
            "tpuslice" | "tpuslices" | "tpus" | "slice" => Kind::TpuSlice,
            "preprocessbatch" | "preprocessbatches" | "ppb" => Kind::PreprocessBatch,
            other => anyhow::bail!(
                "{other:?} has no logs here: use trainingpipeline (tpl), tpuslice (tpus) or preprocessbatch (ppb)"
            ),
        };
        if name.is_empty() || name.contains('/') {
            anyhow::bail!("{text:?}: expected KIND/NAME with one name");
        }
        Ok(Self {
            kind,
            name: name.to_string(),
        })
    }

    pub fn display(&self, namespace: &str) -> String {
        format!("{} {namespace}/{}", self.kind.name(), self.name)
    }
}

/// One stream of log entries.
#[derive(Clone, Debug, PartialEq)]
pub struct Stream {
    /// Shown before each line when more than one stream prints (`preprocess`, `train`).
    pub prefix: Option<&'static str>,
    /// What it is, for messages ("the Dataproc batch projects/…").
    pub what: String,
    pub source: LogSource,
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

/// The object is not there (any more).
pub fn is_gone(e: &anyhow::Error) -> bool {
    e.downcast_ref::<kube::Error>()
        .is_some_and(|e| matches!(e, kube::Error::Api(s) if s.code == 404))
}

pub async fn resolve(
    client: &kube::Client,
    namespace: &str,
    object: &Object,
    args: &LogsArgs,
) -> anyhow::Result<Resolved> {
    let name = &object.name;
    let not_found = |e: kube::Error| {
        let gone = matches!(&e, kube::Error::Api(s) if s.code == 404);
        let what = object.display(namespace);
        anyhow::Error::new(e).context(if gone {
            format!("{what} not found")
        } else {
            format!("reading {what}")
        })
    };
    match object.kind {
        Kind::TrainingPipeline => {
            let tp = Api::<TrainingPipeline>::namespaced(client.clone(), namespace)
                .get(name)
                .await
                .map_err(not_found)?;
            Ok(pipeline(&tp, args))
        }
        Kind::TpuSlice => {
            let slice = Api::<TpuSlice>::namespaced(client.clone(), namespace)
                .get(name)
                .await
                .map_err(not_found)?;
            slice_streams(&slice, args)
        }
        Kind::PreprocessBatch => {
            let b = Api::<PreprocessBatch>::namespaced(client.clone(), namespace)
                .get(name)
                .await
                .map_err(not_found)?;
            batch(&b, args)
        }
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
    })
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
        }),
        None => r.notes.push("no Dataproc batch yet".into()),
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_as_kubectl_takes_them() {
        for text in [
            "tpl/q",
            "TrainingPipeline/q",
            "trainingpipelines.tpu-operator.dev/q",
            "pipeline/q",
        ] {
            assert_eq!(
                Object::parse(text).unwrap().kind,
                Kind::TrainingPipeline,
                "{text}"
            );
        }
        assert_eq!(Object::parse("tpus/s").unwrap().kind, Kind::TpuSlice);
        assert_eq!(Object::parse("ppb/b").unwrap().kind, Kind::PreprocessBatch);
        let err = Object::parse("pod/x").unwrap_err().to_string();
        assert!(err.contains("trainingpipeline (tpl)"), "{err}");
        assert!(Object::parse("tpl").is_err());
        assert!(Object::parse("tpl/a/b").is_err());
    }
}
