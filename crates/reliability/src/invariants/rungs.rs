//! One request alive per slice: a slice never has requests alive for two incarnations at once.
//! With `spec.capacityPlan` each rung (and zone) tried is an incarnation, so two requests alive
//! is two rungs asked at once, which the plan promises never happens: the rung left behind is
//! deleted and seen gone before the next create.
//!
//! A request is what one create asked for: a queued resource (with the nodes it made), a TPU node
//! created on its own, a Compute Engine instance inserted directly, or a MIG (with its members
//! and resize requests). Each kind's own "two of one kind" check is in `live`; this one also
//! catches two of different kinds (a reservation's queued resource beside a Spot node).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{UID_LABEL, Violations, label, live::compute_by_uid, slice_going, slice_key};

/// The requests alive for each slice, by its `tpu-operator-uid` (for a multislice, by UID and
/// slice index: each slice is a request of its own, and a lost slice's queued resource being
/// deleted while its replacement is asked for is not alive).
pub fn requests_alive(gcp: &gcp_emulator::Emulator) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for q in gcp.queued_resources() {
        if let Some(uid) = queued_uid(&q).filter(|_| !slice_going(&q)) {
            out.entry(slice_key(uid, name(&q)))
                .or_default()
                .insert(format!("queued resource {}", name(&q)));
        }
    }
    for n in gcp.nodes() {
        if let Some(uid) = label(&n, UID_LABEL).filter(|_| !slice_going(&n)) {
            out.entry(slice_key(uid, name(&n)))
                .or_default()
                .insert(node_request(&n));
        }
    }
    for (uid, names) in compute_by_uid(gcp) {
        out.entry(uid).or_default().extend(names);
    }
    out
}

/// Slices with requests alive for two rungs (incarnations) at once.
pub fn two_rungs(gcp: &gcp_emulator::Emulator) -> Violations {
    two_or_more(requests_alive(gcp))
}

/// [`two_rungs`] of requests already read with [`requests_alive`].
pub fn two_or_more(alive: BTreeMap<String, BTreeSet<String>>) -> Violations {
    let mut v = Violations::default();
    for (uid, requests) in alive {
        if requests.len() > 1 {
            v.push(format!(
                "two rungs: {} requests alive at once for uid {uid}: {requests:?}",
                requests.len()
            ));
        }
    }
    v
}

/// The request a node belongs to: its queued resource's, if a queued resource made it (that
/// node and its queued resource are one request), else its own.
fn node_request(node: &Value) -> String {
    match node["queuedResource"].as_str() {
        Some(q) => format!("queued resource {q}"),
        None => format!("node {}", name(node)),
    }
}

/// The UID label of the node a queued resource asks for.
fn queued_uid(q: &Value) -> Option<&str> {
    q["tpu"]["nodeSpec"][0]["node"]["labels"][UID_LABEL].as_str()
}

fn name(r: &Value) -> &str {
    r["name"].as_str().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(name: &str, uid: &str, queued: Option<&str>) -> Value {
        let mut n = json!({"name": name, "labels": {UID_LABEL: uid}});
        if let Some(q) = queued {
            n["queuedResource"] = json!(q);
        }
        n
    }

    #[test]
    fn a_queued_resource_and_its_own_node_are_one_request() {
        let n = node("nodes/a", "u", Some("projects/p/queuedResources/q"));
        assert_eq!(node_request(&n), "queued resource projects/p/queuedResources/q");
        let alive = BTreeMap::from([(
            "u".to_owned(),
            BTreeSet::from([
                node_request(&n),
                "queued resource projects/p/queuedResources/q".into(),
            ]),
        )]);
        assert!(two_or_more(alive).is_empty());
    }

    #[test]
    fn a_queued_resource_beside_a_node_of_its_own_is_two_rungs() {
        let n = node("nodes/b", "u", None);
        let alive = BTreeMap::from([(
            "u".to_owned(),
            BTreeSet::from([
                node_request(&n),
                "queued resource projects/p/queuedResources/q".into(),
            ]),
        )]);
        let v = two_or_more(alive);
        assert_eq!(v.0.len(), 1, "{v}");
        assert!(v.0[0].contains("uid u"), "{v}");
    }

    #[test]
    fn requests_of_different_slices_are_not_counted_together() {
        let alive = BTreeMap::from([
            ("u".to_owned(), BTreeSet::from(["node a".to_owned()])),
            ("w".to_owned(), BTreeSet::from(["node b".to_owned()])),
        ]);
        assert!(two_or_more(alive).is_empty());
    }
}
