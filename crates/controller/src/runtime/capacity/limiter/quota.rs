//! Which quotas there are: the groups of methods that share one, the line (group, project and
//! region) a call is counted on, and the per-minute limit configured for each group. Plain
//! values, apart from the window and the waiters the limiter keeps for each line.

use std::collections::BTreeMap;

/// A group of methods that share one rate quota per project (and region, where the API counts
/// so).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    /// Cloud TPU `nodes.create` and `queuedResources.create`, per project.
    TpuCreate,
    /// Compute Engine instance creates (Compute's mutation group, per project).
    ComputeMutate,
    /// Dataproc Serverless `batches.create`, per project and region.
    DataprocBatchCreate,
    /// Vertex AI `customJobs.create`, per project and region.
    VertexJobCreate,
}

impl Group {
    pub const ALL: [Group; 4] = [
        Self::TpuCreate,
        Self::ComputeMutate,
        Self::DataprocBatchCreate,
        Self::VertexJobCreate,
    ];

    /// The metric label, and the name in `--create-limit` and the config file's `createLimits`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TpuCreate => "tpuCreate",
            Self::ComputeMutate => "computeMutate",
            Self::DataprocBatchCreate => "dataprocBatchCreate",
            Self::VertexJobCreate => "vertexJobCreate",
        }
    }

    /// What a status message calls the calls of this group.
    pub fn noun(self) -> &'static str {
        match self {
            Self::TpuCreate => "TPU creates",
            Self::ComputeMutate => "Compute Engine mutations",
            Self::DataprocBatchCreate => "Dataproc batch creates",
            Self::VertexJobCreate => "Vertex AI job creates",
        }
    }

    /// Google's quota, per minute, as its public pages give it (the gcp-emulator's rate quotas
    /// cite the same pages):
    /// - TPU: no public page lists the create rate; 91/min is the project-wide
    ///   `tpu.googleapis.com/qps/create` quota measured by Marin's TPU autoscaler;
    /// - Compute Engine: the "Queries" mutation group, 1,500/min per project;
    /// - Dataproc Serverless: `BatchOperationRequestsPerMinutePerProjectPerRegion`, 200;
    /// - Vertex AI: job or LRO submission requests, 60/min per project and region.
    pub fn default_per_minute(self) -> u32 {
        match self {
            Self::TpuCreate => 91,
            Self::ComputeMutate => 1500,
            Self::DataprocBatchCreate => 200,
            Self::VertexJobCreate => 60,
        }
    }

    pub fn parse(name: &str) -> Option<Group> {
        Self::ALL.into_iter().find(|g| g.as_str() == name)
    }
}

/// One quota: a group of methods in one project (and region).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Line {
    pub project: String,
    /// The region, for groups Google counts per region; `None` otherwise.
    pub region: Option<String>,
    pub group: Group,
}

impl Line {
    pub fn new(group: Group, project: &str) -> Self {
        Self {
            project: project.to_owned(),
            region: None,
            group,
        }
    }

    pub fn in_region(group: Group, project: &str, region: &str) -> Self {
        Self {
            project: project.to_owned(),
            region: Some(region.to_owned()),
            group,
        }
    }

    /// The line of a call under `parent` (`projects/<p>/locations/<region>`), for a group Google
    /// counts per region; `None` if `parent` is not of that form.
    pub fn under(group: Group, parent: &str) -> Option<Self> {
        let (project, region) = parent.strip_prefix("projects/")?.split_once("/locations/")?;
        (!project.contains('/') && !region.is_empty() && !region.contains('/'))
            .then(|| Self::in_region(group, project, region))
    }

    /// `project demo (us-central1)`.
    pub fn scope(&self) -> String {
        match &self.region {
            Some(region) => format!("project {} ({region})", self.project),
            None => format!("project {}", self.project),
        }
    }
}

/// The quota of each group, per minute; a group absent is not limited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits(pub BTreeMap<Group, u32>);

impl Default for Limits {
    fn default() -> Self {
        Self(
            Group::ALL
                .into_iter()
                .map(|g| (g, g.default_per_minute()))
                .collect(),
        )
    }
}

impl Limits {
    /// Applies `group=N` (N a quota per minute; 0: not limited). The error names the setting
    /// and what it accepts.
    pub fn set(&mut self, setting: &str) -> Result<(), String> {
        let usage = || {
            let groups: Vec<&str> = Group::ALL.iter().map(|g| g.as_str()).collect();
            format!(
                "create limit {setting:?} (--create-limit, config createLimits): expected GROUP=PER_MINUTE with GROUP one of {} and PER_MINUTE 0 (no limit) or at least 2",
                groups.join(", ")
            )
        };
        let (name, value) = setting.split_once('=').ok_or_else(usage)?;
        let group = Group::parse(name.trim()).ok_or_else(usage)?;
        let per_minute: u32 = value.trim().parse().map_err(|_| usage())?;
        match per_minute {
            0 => {
                self.0.remove(&group);
            }
            1 => return Err(usage()),
            n => {
                self.0.insert(group, n);
            }
        }
        Ok(())
    }
}
