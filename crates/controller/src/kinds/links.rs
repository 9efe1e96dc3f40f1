//! The `links` every status carries: each cloud object's Cloud Console page and the Logs
//! Explorer query of its logs, from its name alone (`tpu_operator_gcp::logging::sources` has
//! the formats and where they are documented).
//!
//! Does not touch Kubernetes or Google Cloud.

use std::collections::BTreeMap;

use tpu_operator_api::common::Links;
use tpu_operator_gcp::logging::sources::{self, LogSource, SLICE_LABEL};

/// A Vertex AI custom job, with the web access URIs it reports and the TensorBoard it writes to.
pub fn vertex_job(
    name: &str,
    web_access: BTreeMap<String, String>,
    tensorboard: Option<String>,
) -> Option<Links> {
    Some(Links {
        console: Some(sources::vertex_job_console(name)?),
        logs: LogSource::vertex_job(name).map(|s| s.explorer_url()),
        web_access,
        tensorboard,
    })
}

/// A Dataproc Serverless batch.
pub fn dataproc_batch(name: &str) -> Option<Links> {
    Some(Links {
        console: Some(sources::dataproc_batch_console(name)?),
        logs: LogSource::dataproc_batch(name).map(|s| s.explorer_url()),
        ..Links::default()
    })
}

/// What a TpuSlice's links are made of.
pub struct Slice<'a> {
    pub project: &'a str,
    pub uid: &'a str,
    /// The current node (`projects/{p}/locations/{zone}/nodes/{id}`), when there is one.
    pub node: Option<&'a str>,
    /// The node's Console page (its backend knows which), when there is a node.
    pub console: Option<String>,
    /// The slice runs `spec.workload` (whose container logs through `gcplogs`), not its own
    /// startup script.
    pub workload: bool,
}

/// A TpuSlice: its node's page and its logs (the workload container's on every host and
/// incarnation; else, with the node's id, the TPU VM hosts' own).
pub fn slice(s: &Slice<'_>) -> Option<Links> {
    let logs = if s.workload {
        Some(LogSource::Workload {
            project: s.project.to_string(),
            labels: vec![(SLICE_LABEL, s.uid.to_string())],
        })
    } else {
        s.node
            .and_then(sources::node_parts)
            .map(|(project, node_id)| LogSource::TpuWorker { project, node_id })
    };
    let links = Links {
        console: s.console.clone(),
        logs: logs.map(|l| l.explorer_url()),
        ..Links::default()
    };
    (links != Links::default()).then_some(links)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_slice_links_its_logs_before_and_after_its_node() {
        let mut s = Slice {
            project: "p1",
            uid: "u-1",
            node: None,
            console: None,
            workload: true,
        };
        let before = slice(&s).unwrap();
        assert_eq!(before.console, None);
        assert!(before.logs.unwrap().contains("tpu-operator-slice"));
        s.node = Some("projects/p1/locations/us-east5-b/nodes/n-0");
        s.console = Some("https://console.example/n-0".into());
        let after = slice(&s).unwrap();
        assert_eq!(after.console.as_deref(), Some("https://console.example/n-0"));
    }

    #[test]
    fn a_vertex_job_links_its_web_access_and_tensorboard() {
        let web = BTreeMap::from([(
            "workerpool0-0".to_string(),
            "https://x-dot-r.example/".to_string(),
        )]);
        let board = "projects/p1/locations/r/tensorboards/7".to_string();
        let l = vertex_job(
            "projects/p1/locations/r/customJobs/9",
            web.clone(),
            Some(board.clone()),
        )
        .unwrap();
        assert_eq!((l.web_access, l.tensorboard), (web, Some(board)));
        assert_eq!(
            vertex_job("projects/p1/locations/r/batches/9", BTreeMap::new(), None),
            None
        );
    }

    #[test]
    fn a_slice_with_its_own_script_links_the_hosts_logs_once_it_has_a_node() {
        let mut s = Slice {
            project: "p1",
            uid: "u-1",
            node: None,
            console: None,
            workload: false,
        };
        assert_eq!(slice(&s), None);
        s.node = Some("projects/p1/locations/z/nodes/n-0");
        assert!(slice(&s).unwrap().logs.unwrap().contains("tpu_worker"));
    }
}
