//! Pure translations between Compute Engine resources and the TPU API's model, in which the
//! controller plans a slice whichever API provisions it. No I/O.
//!
//! What each Compute Engine state means for a slice (Compute Engine's instance lifecycle,
//! docs.cloud.google.com/compute/docs/instances/instance-lifecycle, and the resize-request
//! states of docs.cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig):
//!
//! | Compute Engine                               | TPU API model                  |
//! |----------------------------------------------|--------------------------------|
//! | instance PROVISIONING, STAGING, PENDING      | node CREATING                  |
//! | instance RUNNING                             | node READY, HEALTHY            |
//! | instance REPAIRING                           | node REPAIRING                 |
//! | instance STOPPING, SUSPENDING, PENDING_STOP  | node DELETING (it is going away) |
//! | instance TERMINATED / STOPPED, spot          | node PREEMPTED                 |
//! | instance TERMINATED / STOPPED, otherwise     | node TERMINATED                |
//! | group: every member RUNNING, none missing    | node READY                     |
//! | group: a member preempted                    | node PREEMPTED                 |
//! | group: members being deleted, none created   | node DELETING                  |
//! | group: no members, none wanted               | node STOPPED (delete it)       |
//! | resize request CREATING (being created)      | queued resource CREATING       |
//! | resize request ACCEPTED (waiting for capacity) | WAITING_FOR_RESOURCES        |
//! | resize request SUCCEEDED, members present    | ACTIVE                         |
//! | resize request SUCCEEDED, no members left    | FAILED, DEADLINE_EXCEEDED (run duration over) |
//! | resize request FAILED                        | FAILED with the request's error |
//! | resize request CANCELLED                     | SUSPENDED by a user            |

use std::collections::BTreeMap;

/// Port the TPU runtime listens on, reported in a TPU node's network endpoints.
pub(super) const TPU_PORT: i32 = 8470;

/// How a slice's VMs get capacity on Compute Engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Provisioning {
    Standard,
    /// Spot VMs, stopped when preempted so the preemption stays visible.
    Spot,
    /// A specific reservation, by name or full URL.
    Reservation(String),
    /// Flex-start through a resize request running this many seconds.
    FlexStart {
        run_seconds: i64,
    },
}

/// Everything needed to create a slice on Compute Engine.
#[derive(Clone, Debug, PartialEq)]
pub struct SliceRequest {
    pub project: String,
    pub zone: String,
    /// Deterministic id: the instance (single host) or group, template, policy and resize
    /// request (several hosts or flex-start) are all named by it.
    pub id: String,
    pub machine_type: String,
    pub hosts: u32,
    pub topology: String,
    /// The TPU API-style accelerator type the slice reports (`v6e-8`).
    pub accelerator_type: String,
    pub image: String,
    pub boot_disk_gb: i64,
    pub provisioning: Provisioning,
    pub labels: BTreeMap<String, String>,
    pub metadata: BTreeMap<String, String>,
    pub network: Option<String>,
    pub subnetwork: Option<String>,
    pub external_ips: bool,
    pub tags: Vec<String>,
    pub service_account: Option<(String, Vec<String>)>,
    /// Names the owning object, for people reading the console (templates, policies and groups
    /// carry no labels).
    pub description: String,
}

impl SliceRequest {
    /// One instance, or a managed instance group (several hosts, or flex-start, which only
    /// resize requests provide).
    pub fn layout(&self) -> Layout {
        if self.hosts > 1 || matches!(self.provisioning, Provisioning::FlexStart { .. }) {
            Layout::Group
        } else {
            Layout::Instance
        }
    }
}

/// How a slice is laid out on Compute Engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    Instance,
    Group,
}

/// The region of a zone (`us-east5-b` → `us-east5`).
pub fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(region, _)| region)
}

/// `projects/{p}/locations/{zone}/{collection}/{id}` → (project, zone, id).
pub fn parse_tpu_name<'a>(name: &'a str, collection: &str) -> Option<(&'a str, &'a str, &'a str)> {
    let rest = name.strip_prefix("projects/")?;
    let (project, rest) = rest.split_once("/locations/")?;
    let (zone, rest) = rest.split_once('/')?;
    let id = rest.strip_prefix(collection)?.strip_prefix('/')?;
    (!id.contains('/')).then_some((project, zone, id))
}

/// The last path segment of a URL or resource name.
pub fn short_name(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

/// Base name of a group's instances: Compute Engine appends `-xxxx` and allows 58 characters.
pub fn base_instance_name(id: &str) -> String {
    id.chars()
        .take(58)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}

mod bodies;
mod listed;
mod operation;
mod tpu_model;

pub use bodies::{instance_body, manager_body, needs_policy, policy_body, resize_body, template_body};
pub use listed::{listed_slices, watch_name};
pub use operation::{code_number, operation};
pub use tpu_model::{group_node, instance_node, resize_queued};

#[cfg(test)]
mod tests;
