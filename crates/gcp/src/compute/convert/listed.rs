//! One zone's instance listing read as the slices it holds, for the operator's cloud watch: a
//! settled Compute Engine slice is compared on every listing round by what changes on it by
//! itself (its hosts' status and announced maintenance), as a TPU node is by `nodes.list`.
//!
//! A listed instance does not say which slice it serves, so it is filed under both names it can
//! have: its own (a single-instance slice is its instance) and its name without the last
//! `-xxxx` (a group's members are its base instance name plus four characters). Only names some
//! slice waits on are looked at, so the name that fits nobody costs nothing.

use std::collections::BTreeMap;

use google_cloud_compute_v1::model::Instance;
use google_cloud_tpu_v2::model::{Node, node};

use super::{
    base_instance_name, parse_tpu_name,
    tpu_model::{instance_state, slice_notice},
};

/// The name slice `node_name` (`projects/{p}/locations/{zone}/nodes/{id}`) is listed under:
/// its node name when it is one instance, the group's base instance name in the same place
/// when it is a group.
pub fn watch_name(node_name: &str, group: bool) -> Option<String> {
    let (project, zone, id) = parse_tpu_name(node_name, "nodes")?;
    let id = if group {
        base_instance_name(id)
    } else {
        id.to_owned()
    };
    Some(format!("projects/{project}/locations/{zone}/nodes/{id}"))
}

/// The slices `instances` (a listing of the zone `parent`, `projects/{p}/locations/{zone}`)
/// may hold, each as a TPU node under every name it may be watched by ([`watch_name`]), carrying
/// what a listing compares: READY and HEALTHY while every host runs (else the first other
/// host's state), and the slice's notice as the slice read by name shows it.
pub fn listed_slices(parent: &str, instances: Vec<Instance>) -> Vec<Node> {
    let mut by_name: BTreeMap<String, Vec<Instance>> = BTreeMap::new();
    for instance in instances {
        let Some(name) = instance.name.clone() else {
            continue;
        };
        if let Some((base, _)) = name.rsplit_once('-') {
            by_name.entry(base.to_owned()).or_default().push(instance.clone());
        }
        by_name.entry(name).or_default().push(instance);
    }
    by_name
        .into_iter()
        .map(|(id, hosts)| slice_node(&format!("{parent}/nodes/{id}"), &hosts))
        .collect()
}

fn slice_node(name: &str, hosts: &[Instance]) -> Node {
    let states: Vec<node::State> = hosts.iter().map(instance_state).collect();
    let state = states
        .iter()
        .find(|s| **s != node::State::Ready)
        .cloned()
        .unwrap_or(node::State::Ready);
    let health = if state == node::State::Ready {
        node::Health::Healthy
    } else {
        node::Health::Unspecified
    };
    let node = Node::new().set_name(name).set_state(state).set_health(health);
    crate::maintenance::carry_notice(node, slice_notice(hosts))
}
