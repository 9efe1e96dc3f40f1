//! Where the logs of each cloud object the operator makes live, and the Cloud Console pages
//! that show the object and its logs.
//!
//! Every URL and query here follows a public format:
//! * Vertex AI custom job page: `ai/platform/locations/{region}/training/{id}?project={p}`, the
//!   dashboard link Google's Vertex AI SDK for Python prints for a custom job
//!   (`_dashboard_uri` in `google/cloud/aiplatform/jobs.py`); its logs have the monitored
//!   resource `ml_job` with label `job_id`.
//! * Dataproc batch page: `dataproc/batches/{region}/{id}?project={p}`, the link Dataproc itself
//!   puts in a failed batch's `stateMessage`; its logs have the monitored resource
//!   `cloud_dataproc_batch` with label `batch_id`.
//! * TPU node page: `compute/tpus/details/{zone}/{node}?project={p}`; a TPU VM host's own logs
//!   have the monitored resource `tpu_worker` with label `node_id`.
//! * The workload container the operator's startup script runs logs through docker's
//!   `gcplogs` driver (<https://docs.docker.com/engine/logging/drivers/gcplogs/>): log
//!   `gcplogs-docker-driver`, monitored resource `gce_instance`, and the container labels named
//!   by `--log-opt labels=` under `jsonPayload.container.metadata` (moby's
//!   `daemon/logger/gcplogs/gcplogging.go`). The operator's labels name the slice, node, host,
//!   pipeline and attempt, so one query finds a run across its hosts and recreations.
//! * Logs Explorer: `logs/query;query={percent-encoded query}?project={p}`
//!   (<https://cloud.google.com/logging/docs/view/building-queries>).

use super::filter::LogFilter;

/// Cloud Console origin.
const CONSOLE: &str = "https://console.cloud.google.com";
/// The log docker's `gcplogs` driver writes to.
pub const WORKLOAD_LOG: &str = "gcplogs-docker-driver";
/// Container label (and so log label) naming the TpuSlice's uid: constant across the slice's
/// recreations and resumes.
pub const SLICE_LABEL: &str = "tpu-operator-slice";
/// Container label naming the node (one incarnation of a slice).
pub const NODE_LABEL: &str = "tpu-operator-node";
/// Container label naming the host (TPU VM worker number, 0 for the first).
pub const HOST_LABEL: &str = "tpu-operator-host";
/// Container label naming the TrainingPipeline's uid, when the slice is a pipeline's.
pub const PIPELINE_LABEL: &str = "tpu-operator-pipeline";
/// Container label naming the pipeline attempt the slice runs.
pub const ATTEMPT_LABEL: &str = "tpu-operator-attempt";

/// The logs of one cloud object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogSource {
    /// A Vertex AI custom job.
    VertexJob {
        project: String,
        region: String,
        job_id: String,
    },
    /// A Dataproc Serverless batch.
    DataprocBatch {
        project: String,
        region: String,
        batch_id: String,
    },
    /// The operator's workload container on a slice's hosts, selected by its container labels
    /// (pairs of one of the `*_LABEL` keys and a value; all must match).
    Workload {
        project: String,
        labels: Vec<(&'static str, String)>,
    },
    /// A TPU VM host's own logs (a slice that runs its own startup script).
    TpuWorker { project: String, node_id: String },
}

/// `projects/{p}/locations/{location}/{collection}/{id}` → (p, location, id).
fn parse(name: &str, collection: &str) -> Option<(String, String, String)> {
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        ["projects", p, "locations", l, c, id] if *c == collection && !id.is_empty() => {
            Some((p.to_string(), l.to_string(), id.to_string()))
        }
        _ => None,
    }
}

impl LogSource {
    /// A custom job from its name, `projects/{p}/locations/{region}/customJobs/{id}`.
    pub fn vertex_job(name: &str) -> Option<Self> {
        let (project, region, job_id) = parse(name, "customJobs")?;
        Some(Self::VertexJob {
            project,
            region,
            job_id,
        })
    }

    /// A batch from its name, `projects/{p}/locations/{region}/batches/{id}`.
    pub fn dataproc_batch(name: &str) -> Option<Self> {
        let (project, region, batch_id) = parse(name, "batches")?;
        Some(Self::DataprocBatch {
            project,
            region,
            batch_id,
        })
    }

    /// The project the logs are in.
    pub fn project(&self) -> &str {
        match self {
            Self::VertexJob { project, .. }
            | Self::DataprocBatch { project, .. }
            | Self::Workload { project, .. }
            | Self::TpuWorker { project, .. } => project,
        }
    }

    /// The query selecting this object's log entries.
    pub fn filter(&self) -> LogFilter {
        let f = LogFilter::default();
        match self {
            Self::VertexJob { job_id, .. } => f
                .eq(&["resource", "type"], "ml_job")
                .eq(&["resource", "labels", "job_id"], job_id),
            Self::DataprocBatch { batch_id, .. } => f
                .eq(&["resource", "type"], "cloud_dataproc_batch")
                .eq(&["resource", "labels", "batch_id"], batch_id),
            Self::Workload { project, labels } => {
                let log = format!("projects/{project}/logs/{WORKLOAD_LOG}");
                labels.iter().fold(f.eq(&["logName"], &log), |f, (k, v)| {
                    f.eq(&["jsonPayload", "container", "metadata", k], v)
                })
            }
            Self::TpuWorker { node_id, .. } => f
                .eq(&["resource", "type"], "tpu_worker")
                .eq(&["resource", "labels", "node_id"], node_id),
        }
    }

    /// The Logs Explorer page running [`LogSource::filter`].
    pub fn explorer_url(&self) -> String {
        explorer_url(self.project(), &self.filter())
    }
}

/// The Logs Explorer page running `filter` in `project`.
pub fn explorer_url(project: &str, filter: &LogFilter) -> String {
    format!(
        "{CONSOLE}/logs/query;query={}?project={}",
        urlencoding::encode(&filter.render()),
        urlencoding::encode(project)
    )
}

/// The Cloud Console page of a custom job.
pub fn vertex_job_console(name: &str) -> Option<String> {
    let (p, region, id) = parse(name, "customJobs")?;
    Some(format!(
        "{CONSOLE}/ai/platform/locations/{region}/training/{id}?project={p}"
    ))
}

/// The Cloud Console page of a Dataproc batch.
pub fn dataproc_batch_console(name: &str) -> Option<String> {
    let (p, region, id) = parse(name, "batches")?;
    Some(format!("{CONSOLE}/dataproc/batches/{region}/{id}?project={p}"))
}

/// The Cloud Console page of a TPU node, `projects/{p}/locations/{zone}/nodes/{id}`.
pub fn tpu_node_console(name: &str) -> Option<String> {
    let (p, zone, id) = parse(name, "nodes")?;
    Some(format!("{CONSOLE}/compute/tpus/details/{zone}/{id}?project={p}"))
}

/// The Compute Engine VM instances page of a project (a ComputeEngine slice's hosts are
/// instances there, named after the slice).
pub fn compute_instances_console(project: &str) -> String {
    format!(
        "{CONSOLE}/compute/instances?project={}",
        urlencoding::encode(project)
    )
}

/// The project and node id of a node name.
pub fn node_parts(name: &str) -> Option<(String, String)> {
    let (p, _, id) = parse(name, "nodes")?;
    Some((p, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_custom_job_links_to_its_page_and_its_ml_job_logs() {
        let name = "projects/p1/locations/us-central1/customJobs/123";
        assert_eq!(
            vertex_job_console(name).unwrap(),
            "https://console.cloud.google.com/ai/platform/locations/us-central1/training/123?project=p1"
        );
        let src = LogSource::vertex_job(name).unwrap();
        assert_eq!(
            src.filter().render(),
            "resource.type = \"ml_job\"\nAND resource.labels.job_id = \"123\""
        );
        assert_eq!(
            src.explorer_url(),
            "https://console.cloud.google.com/logs/query;query=resource.type%20%3D%20%22ml_job%22%0AAND%20resource.labels.job_id%20%3D%20%22123%22?project=p1"
        );
    }

    #[test]
    fn a_batch_links_to_its_page_and_its_logs() {
        let name = "projects/p1/locations/europe-west4/batches/b-1";
        assert_eq!(
            dataproc_batch_console(name).unwrap(),
            "https://console.cloud.google.com/dataproc/batches/europe-west4/b-1?project=p1"
        );
        assert!(
            LogSource::dataproc_batch(name)
                .unwrap()
                .filter()
                .render()
                .contains("resource.type = \"cloud_dataproc_batch\"")
        );
    }

    #[test]
    fn a_workload_is_selected_by_its_container_labels_in_the_docker_log() {
        let src = LogSource::Workload {
            project: "p1".into(),
            labels: vec![(SLICE_LABEL, "uid-1".into()), (HOST_LABEL, "0".into())],
        };
        assert_eq!(
            src.filter().render(),
            "logName = \"projects/p1/logs/gcplogs-docker-driver\"\n\
             AND jsonPayload.container.metadata.\"tpu-operator-slice\" = \"uid-1\"\n\
             AND jsonPayload.container.metadata.\"tpu-operator-host\" = \"0\""
        );
        assert_eq!(
            tpu_node_console("projects/p1/locations/us-east5-b/nodes/n-0").unwrap(),
            "https://console.cloud.google.com/compute/tpus/details/us-east5-b/n-0?project=p1"
        );
    }

    #[test]
    fn names_of_another_shape_have_no_links() {
        assert_eq!(vertex_job_console("projects/p1/locations/r/batches/x"), None);
        assert_eq!(LogSource::dataproc_batch("batches/x"), None);
        assert_eq!(tpu_node_console("projects/p1/locations/z/nodes/"), None);
    }
}
