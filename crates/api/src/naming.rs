//! Deterministic cloud names and identity labels.
//!
//! Every cloud object is named from the owning custom resource's namespace, name and UID, so a
//! create retried after a crash finds the object the first attempt made (ALREADY_EXISTS / adopt)
//! instead of paying for a second one. Names stay within each API's charset and length rules;
//! when the readable part must be truncated, a hash of the UID keeps names unique.

use std::collections::BTreeMap;

/// Label keys of the cloud identity every object the operator creates carries.
pub mod labels {
    /// `managed-by=tpu-operator`.
    pub const MANAGED_BY: &str = "managed-by";
    /// Value of [`MANAGED_BY`].
    pub const MANAGED_BY_VALUE: &str = "tpu-operator";
    /// Namespace of the owning custom resource.
    pub const NAMESPACE: &str = "tpu-operator-namespace";
    /// Name of the owning custom resource (sanitized).
    pub const NAME: &str = "tpu-operator-name";
    /// `metadata.uid` of the owning custom resource.
    pub const UID: &str = "tpu-operator-uid";
    /// Id of the cluster the operator runs in.
    pub const CLUSTER: &str = "tpu-operator-cluster";
}

/// Maximum length of a TPU node id / queued resource id / Dataproc batch id.
pub const MAX_ID_LEN: usize = 63;
/// Minimum length of a Dataproc batch id.
pub const MIN_BATCH_ID_LEN: usize = 4;
/// Maximum length of a GCP label value.
pub const MAX_LABEL_VALUE_LEN: usize = 63;

/// The Kubernetes identity a cloud name is derived from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectIdentity {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
}

impl ObjectIdentity {
    /// Convenience constructor.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, uid: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    /// 8 hex characters identifying this object (FNV-1a over the UID). Stable across releases:
    /// changing it would make the operator lose track of existing cloud objects.
    pub fn short_hash(&self) -> String {
        format!("{:08x}", fnv1a(self.uid.as_bytes()) as u32)
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Lowercases and maps every character outside `[a-z0-9-]` to `-`, collapsing runs of `-`.
fn to_dns_chars(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars().flat_map(char::to_lowercase) {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if !(c == '-' && out.ends_with('-')) {
            out.push(c);
        }
    }
    out
}

/// Builds `<readable>-<suffix>` within `max` characters, RFC 1035 style (starts with a letter,
/// no trailing `-`). The readable part is truncated first; the suffix always survives.
fn compose(prefix: &str, readable: &str, suffix: &str, max: usize) -> String {
    let budget = max.saturating_sub(suffix.len() + 1 + prefix.len());
    let mut body: String = to_dns_chars(readable).chars().take(budget).collect();
    while body.ends_with('-') {
        body.pop();
    }
    let head = match (prefix.is_empty(), body.is_empty()) {
        (true, _) => body,
        (false, true) => prefix.trim_end_matches('-').to_string(),
        (false, false) => format!("{prefix}{body}"),
    };
    let head = head.trim_start_matches(|c: char| !c.is_ascii_lowercase());
    if head.is_empty() {
        format!("t-{suffix}")
    } else {
        format!("{head}-{suffix}")
    }
}

/// TPU node id (also used for the queued resource that creates it): lowercase RFC 1035, ≤ 63
/// characters, `<namespace>-<name>-<hash>`, plus `-r<n>` for the n-th recreation after a
/// preemption (a preempted node must be deleted, and its name may linger while it is).
pub fn tpu_node_id(id: &ObjectIdentity, recreation: u32) -> String {
    let suffix = match recreation {
        0 => id.short_hash(),
        n => format!("{}-r{n}", id.short_hash()),
    };
    compose("", &format!("{}-{}", id.namespace, id.name), &suffix, MAX_ID_LEN)
}

/// Node and queued resource id of slice `slice` of a multislice's incarnation `recreation`, which
/// is provisioned as one queued resource per slice (both carry the same id), after the slice was
/// replaced alone `restart` times: `<ns>-<name>-<hash>[-r<n>]-s<k>[r<restart>]`, at most 63
/// characters. A replacement has a name of its own, so it is asked for while the lost one is
/// still being deleted.
pub fn slice_node_id(id: &ObjectIdentity, recreation: u32, slice: u32, restart: u32) -> String {
    let restart = match restart {
        0 => String::new(),
        r => format!("r{r}"),
    };
    let suffix = match recreation {
        0 => format!("{}-s{slice}{restart}", id.short_hash()),
        n => format!("{}-r{n}-s{slice}{restart}", id.short_hash()),
    };
    compose("", &format!("{}-{}", id.namespace, id.name), &suffix, MAX_ID_LEN)
}

/// Queued resource id for a slice: same rules as the node id, so the two are easy to correlate.
pub fn queued_resource_id(id: &ObjectIdentity, recreation: u32) -> String {
    tpu_node_id(id, recreation)
}

/// Dataproc batch id for one attempt (1-based): `^[a-z0-9-]{4,63}$`, `<ns>-<name>-<hash>-a<n>`.
/// Each attempt gets a new id because Dataproc never reuses a batch id.
pub fn dataproc_batch_id(id: &ObjectIdentity, attempt: u32) -> String {
    let suffix = format!("{}-a{attempt}", id.short_hash());
    let name = compose("", &format!("{}-{}", id.namespace, id.name), &suffix, MAX_ID_LEN);
    debug_assert!(name.len() >= MIN_BATCH_ID_LEN);
    name
}

/// Namespace of the name-based (v5) UUIDs of [`request_id`]: the v5 UUID of the URL
/// `https://tpu-operator.dev/request-id`. Never change it: ids made before and after would differ,
/// and a create retried across an upgrade would no longer be recognised as a replay.
fn request_id_namespace() -> uuid::Uuid {
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, b"https://tpu-operator.dev/request-id")
}

/// `requestId` for an idempotent create: a name-based UUID (RFC 9562 version 5, SHA-1) of the
/// object's UID, the purpose and the attempt, so it is unique per object, purpose and attempt and
/// identical across retries of the same call, also after an operator restart.
///
/// A UUID because Cloud TPU documents `queuedResources.create?requestId` as "Idempotent request
/// UUID" (discovery doc `tpu.v2.json`, rev 20261001;
/// <https://cloud.google.com/tpu/docs/reference/rest/v2/projects.locations.queuedResources/create>),
/// and Dataproc's `batches.create?requestId` recommends one ("Recommendation: Set this value to a
/// UUID ... letters, numbers, underscores and hyphens ... maximum length is 40 characters",
/// `dataproc.v1.json`); the 36-character hyphenated form satisfies both.
pub fn request_id(id: &ObjectIdentity, purpose: &str, attempt: u32) -> String {
    let name = format!("{}/{purpose}/{attempt}", id.uid);
    uuid::Uuid::new_v5(&request_id_namespace(), name.as_bytes())
        .hyphenated()
        .to_string()
}

/// The name of an Event published at most once per `key` on `object` (see the controller's
/// `EventRecorder::publish_once`): `<object>.<32 hex digits>`, the digits a name-based UUID of the
/// key, so the same key gives the same name in every process and release. The object's part is
/// cut to keep the name within 253 characters.
pub fn once_event_name(object: &str, key: &str) -> String {
    let digest = uuid::Uuid::new_v5(&request_id_namespace(), format!("event/{key}").as_bytes());
    let object: String = object.chars().take(200).collect();
    format!("{object}.{}", digest.simple())
}

/// Vertex AI custom-job display name (≤ 128 characters; not unique, the UID label is the key).
pub fn vertex_display_name(id: &ObjectIdentity) -> String {
    format!("{}-{}", id.namespace, id.name)
        .chars()
        .take(128)
        .collect()
}

/// Kubernetes name of an owned child, e.g. `<pipeline>-preprocess` or `<pipeline>-train`,
/// truncated to 63 characters with a hash when needed.
pub fn child_name(parent: &ObjectIdentity, suffix: &str) -> String {
    let full = format!("{}-{suffix}", parent.name);
    if full.len() <= MAX_ID_LEN {
        return full;
    }
    compose(
        "",
        &parent.name,
        &format!("{}-{suffix}", parent.short_hash()),
        MAX_ID_LEN,
    )
}

/// Sanitizes any string into a valid GCP label value: lowercase letters, digits, `_` and `-`,
/// at most 63 characters (other characters become `-`).
pub fn sanitize_label_value(s: &str) -> String {
    s.chars()
        .flat_map(char::to_lowercase)
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(MAX_LABEL_VALUE_LEN)
        .collect()
}

/// The identity labels of the team contract, sanitized to GCP label rules.
pub fn identity_labels(id: &ObjectIdentity, cluster_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            labels::MANAGED_BY.to_string(),
            labels::MANAGED_BY_VALUE.to_string(),
        ),
        (labels::NAMESPACE.to_string(), sanitize_label_value(&id.namespace)),
        (labels::NAME.to_string(), sanitize_label_value(&id.name)),
        (labels::UID.to_string(), sanitize_label_value(&id.uid)),
        (labels::CLUSTER.to_string(), sanitize_label_value(cluster_id)),
    ])
}

/// User labels merged with the identity labels; identity labels win on conflict (admission
/// already refuses user labels with the reserved keys).
pub fn object_labels(
    user: &BTreeMap<String, String>,
    id: &ObjectIdentity,
    cluster_id: &str,
) -> BTreeMap<String, String> {
    let mut out = user.clone();
    out.extend(identity_labels(id, cluster_id));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rfc1035(s: &str) -> bool {
        let re = regex::Regex::new(crate::schema::RFC1035_ID).unwrap();
        re.is_match(s) && s.len() <= 63
    }

    fn ident(ns: &str, name: &str) -> ObjectIdentity {
        ObjectIdentity::new(ns, name, "3f2a9c4e-1b2d-4c5e-8f90-a1b2c3d4e5f6")
    }

    #[test]
    fn node_ids_are_deterministic_and_rfc1035() {
        let id = ident("ml-team", "llama-train");
        let a = tpu_node_id(&id, 0);
        assert_eq!(a, tpu_node_id(&id, 0));
        assert!(a.starts_with("ml-team-llama-train-"), "{a}");
        assert!(rfc1035(&a), "{a}");
        let r = tpu_node_id(&id, 2);
        assert!(r.ends_with("-r2") && rfc1035(&r), "{r}");
        assert_ne!(a, r);
    }

    /// A multislice's slice ids differ per slice and per incarnation and stay within 63
    /// characters however long the object's name is (a node id prefix plus `-<k>` did not).
    #[test]
    fn slice_ids_are_distinct_per_slice_and_incarnation_and_fit() {
        let id = ident("ml-team", &"m".repeat(120));
        let ids = [
            slice_node_id(&id, 0, 0, 0),
            slice_node_id(&id, 0, 1, 0),
            slice_node_id(&id, 1, 0, 0),
            slice_node_id(&id, 1, 11, 0),
            slice_node_id(&id, 1, 11, 2),
        ];
        for (i, a) in ids.iter().enumerate() {
            assert!(rfc1035(a) && a.len() <= MAX_ID_LEN, "{a}");
            assert!(ids[i + 1..].iter().all(|b| b != a), "{ids:?}");
        }
        assert!(ids[3].ends_with("-r1-s11"), "{}", ids[3]);
        assert!(ids[4].ends_with("-r1-s11r2"), "{}", ids[4]);
    }

    #[test]
    fn long_and_odd_names_are_truncated_keeping_uniqueness() {
        let long = "x".repeat(253);
        let a = tpu_node_id(&ObjectIdentity::new("ns", &long, "uid-a"), 7);
        let b = tpu_node_id(&ObjectIdentity::new("ns", &long, "uid-b"), 7);
        assert!(rfc1035(&a) && rfc1035(&b), "{a} {b}");
        assert_ne!(a, b);
        let digits = tpu_node_id(&ObjectIdentity::new("1ns", "2.name_X", "u"), 0);
        assert!(rfc1035(&digits), "{digits}");
        assert!(digits.starts_with("ns-2-name-x-"), "{digits}");
    }

    #[test]
    fn batch_ids_follow_dataproc_rules_and_change_per_attempt() {
        let re = regex::Regex::new(r"^[a-z0-9-]{4,63}$").unwrap();
        let id = ident("default", &"p".repeat(80));
        let a1 = dataproc_batch_id(&id, 1);
        let a2 = dataproc_batch_id(&id, 2);
        assert!(re.is_match(&a1) && re.is_match(&a2), "{a1} {a2}");
        assert!(a1.ends_with("-a1") && a2.ends_with("-a2"));
        assert_ne!(a1, a2);
    }

    #[test]
    fn request_ids_fit_40_chars_and_are_stable() {
        let re = regex::Regex::new(r"^[A-Za-z0-9_-]{1,40}$").unwrap();
        let id = ident("default", "quickstart");
        let r = request_id(&id, "create-queued-resource", 1);
        assert!(re.is_match(&r), "{r}");
        assert_eq!(r, request_id(&id, "create-queued-resource", 1));
        assert_ne!(r, request_id(&id, "create-queued-resource", 2));
        assert_ne!(r, request_id(&id, "batch", 1));
        let other = ObjectIdentity::new("default", "quickstart", "another-uid");
        assert_ne!(r, request_id(&other, "create-queued-resource", 1));
    }

    /// Cloud TPU documents `requestId` as an "Idempotent request UUID": the id must parse as a
    /// UUID (version 5, name-based), and must not change between releases.
    #[test]
    fn request_ids_are_name_based_uuids() {
        let id = ident("default", "quickstart");
        let r = request_id(&id, "create-queued-resource", 0);
        let parsed = uuid::Uuid::parse_str(&r).expect("a UUID");
        assert_eq!(parsed.get_version_num(), 5, "{r}");
        assert_eq!(r.len(), 36);
        assert_eq!(r, r.to_lowercase());
        // Only the UID counts (a namespace or name is not identity), and the value is pinned: a
        // change would make retries after an upgrade look like new requests.
        assert_eq!(r, request_id(&ident("x", "y"), "create-queued-resource", 0));
        assert_eq!(r, PINNED_QR_REQUEST_ID);
    }

    const PINNED_QR_REQUEST_ID: &str = "7f708884-7323-5702-85dc-92d48b9f1a4e";

    #[test]
    fn identity_labels_are_valid_gcp_labels() {
        let key = regex::Regex::new(crate::schema::LABEL_KEY).unwrap();
        let value = regex::Regex::new(crate::schema::LABEL_VALUE).unwrap();
        let id = ObjectIdentity::new("Team.A", "N".repeat(100), "3F2A9C4E-1B2D");
        let l = identity_labels(&id, "gke_demo-project_us-central1_prod");
        assert_eq!(l.len(), 5);
        assert_eq!(l[labels::MANAGED_BY], "tpu-operator");
        assert_eq!(l[labels::NAMESPACE], "team-a");
        assert_eq!(l[labels::NAME].len(), 63);
        assert_eq!(l[labels::UID], "3f2a9c4e-1b2d");
        for (k, v) in &l {
            assert!(key.is_match(k) && value.is_match(v), "{k}={v}");
        }
        let user = BTreeMap::from([("team".to_string(), "ml".to_string())]);
        assert_eq!(object_labels(&user, &id, "c").len(), 6);
    }

    #[test]
    fn child_names_fit_kubernetes_names() {
        let id = ident("default", "quickstart");
        assert_eq!(child_name(&id, "preprocess"), "quickstart-preprocess");
        let long = ident("default", &"q".repeat(60));
        let c = child_name(&long, "preprocess");
        assert!(c.len() <= 63 && c.ends_with("-preprocess"), "{c}");
    }

    #[test]
    fn a_once_event_is_named_by_its_key_within_the_name_limit() {
        let a = once_event_name("pol", "uid-1/budget/ml/Day/2026-11-30T00:00:00Z/80");
        assert_eq!(
            a,
            once_event_name("pol", "uid-1/budget/ml/Day/2026-11-30T00:00:00Z/80")
        );
        assert_ne!(
            a,
            once_event_name("pol", "uid-1/budget/ml/Day/2026-11-30T00:00:00Z/90")
        );
        assert!(a.starts_with("pol.") && a.len() == "pol.".len() + 32, "{a}");
        let long = once_event_name(&"p".repeat(253), "k");
        assert!(long.len() <= 253, "{}", long.len());
    }
}
