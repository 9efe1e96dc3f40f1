//! Reusable schema fragments and patterns for fields whose shape is dictated by GCP.
//!
//! Patterns are written for both validators that see them: Go's RE2 in a real kube-apiserver and
//! the `regex` crate in kube-emulator (no look-around, no back-references). Every string, list and
//! map carries a length bound: the API server refuses CRDs whose CEL rules have an unbounded
//! estimated cost, and bounds document the GCP limits anyway.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::json;

/// GCP project id: 6-30 chars, lowercase letters, digits, hyphens, starts with a letter.
pub const PROJECT_ID: &str = r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$";
/// Compute zone, e.g. `us-central2-b`, `europe-west4-a`.
pub const ZONE: &str = r"^[a-z]+-[a-z]+[0-9]+-[a-z]$";
/// Compute region, e.g. `us-central1`, `europe-west4`.
pub const REGION: &str = r"^[a-z]+-[a-z]+[0-9]+$";
/// TPU accelerator type as the TPU API spells it: `v2-8`, `v4-16`, `v5p-8`, `v5litepod-8`, `v6e-8`.
pub const ACCELERATOR_TYPE: &str = r"^(v(2|3|4|5p|5litepod|6e)|tpu7x)-[0-9]{1,5}$";
/// Slice topology: two dimensions (`2x4`, v2/v3/v5e/v6e) or three (`2x2x1`, v4/v5p).
pub const TOPOLOGY: &str = r"^[1-9][0-9]?x[1-9][0-9]?(x[1-9][0-9]?)?$";
/// A Cloud Storage URI: `gs://<bucket>/<optional path>`.
pub const GCS_URI: &str = r"^gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/[^\s]*)?$";
/// A Cloud Storage bucket name (Dataproc's `stagingBucket` takes the name, not a `gs://` URI).
pub const BUCKET_NAME: &str = r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$";
/// GCP label key: starts with a lowercase letter; lowercase letters, digits, `_`, `-`; ≤ 63 chars.
pub const LABEL_KEY: &str = r"^[a-z][a-z0-9_-]{0,62}$";
/// GCP label value: lowercase letters, digits, `_`, `-`; ≤ 63 chars; may be empty.
pub const LABEL_VALUE: &str = r"^[a-z0-9_-]{0,63}$";
/// Duration as `24h`, `90m`, `3600s`, `1h30m`, `7d` (units in descending order, each at most once).
pub const DURATION: &str = r"^([0-9]{1,5}d)?([0-9]{1,6}h)?([0-9]{1,7}m)?([0-9]{1,9}s)?$";
/// RFC 1035 resource id as TPU node ids and Kubernetes-style names use.
pub const RFC1035_ID: &str = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$";
/// TPU reservation, short (`my-reservation`) or full
/// (`projects/<p>/locations/<zone>/reservations/<r>`): one grammar for every field that names a
/// reservation, since a TpuPolicy checks them all the same way.
pub const RESERVATION_NAME: &str =
    r"^(projects/[^/]+/locations/[^/]+/reservations/)?[a-z]([-a-z0-9]{0,61}[a-z0-9])?$";
/// Service account e-mail.
pub const SERVICE_ACCOUNT_EMAIL: &str = r"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+$";
/// Container image reference (registry/repo[:tag][@digest]); lowercase repository path.
pub const IMAGE: &str =
    r"^[a-z0-9]([a-z0-9._/:-]*[a-z0-9])?(:[A-Za-z0-9_.-]{1,128})?(@sha256:[a-f0-9]{64})?$";
/// Environment variable name.
pub const ENV_NAME: &str = r"^[A-Za-z_][A-Za-z0-9_]*$";
/// Network tag (Compute Engine firewall tag): RFC 1035.
pub const NETWORK_TAG: &str = RFC1035_ID;

/// Maximum user labels per object. GCP allows 64 per resource (Dataproc 32); the operator adds five
/// identity labels and Google adds its own `goog-*` labels, and a small bound keeps the CEL key
/// check cheap for the API server's cost estimator.
pub const MAX_USER_LABELS: u32 = 16;
/// Bound for free-form strings that are not GCP identifiers (args, commands, env values).
pub const MAX_ARG_LENGTH: u32 = 4096;
/// Bound for argument and URI lists.
pub const MAX_LIST_ITEMS: u32 = 64;

/// Schema for user-supplied GCP labels: bounded map; values checked by pattern; keys checked by a
/// CEL rule (OpenAPI has no way to constrain map keys in a structural schema).
pub fn gcp_labels(generator: &mut SchemaGenerator) -> Schema {
    let _ = generator;
    json_schema!({
        "type": "object",
        "maxProperties": MAX_USER_LABELS,
        "additionalProperties": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE},
        "x-kubernetes-validations": [
            {
                "rule": format!("self.all(k, k.size() <= 63 && k.matches('{LABEL_KEY}'))"),
                "message": "label keys must follow GCP label rules: start with a lowercase letter, then up to 62 lowercase letters, digits, '_' or '-'"
            },
            {
                "rule": "self.all(k, k != 'managed-by' && !k.startsWith('tpu-operator-'))",
                "message": "label keys 'managed-by' and 'tpu-operator-*' are reserved for the operator's identity labels"
            }
        ]
    })
}

/// Schema for TPU node metadata: bounded map of strings (startup scripts may be long), with
/// Compute Engine's rules for metadata: keys of letters, digits, `-` and `_` under 128 bytes,
/// values of at most 256 KiB (their sum is bounded where the startup script is known, in
/// [`crate::cel`]).
pub fn node_metadata(generator: &mut SchemaGenerator) -> Schema {
    let _ = generator;
    json_schema!({
        "type": "object",
        "maxProperties": 32,
        "additionalProperties": {"type": "string", "maxLength": 262144},
        "x-kubernetes-validations": [
            {
                "rule": "self.all(k, k.size() < 128 && k.matches('^[a-zA-Z0-9_-]+$'))",
                "message": "metadata keys are letters, digits, '-' and '_', shorter than 128 characters (Compute Engine's rule for metadata keys): rename the key"
            }
        ]
    })
}

/// Schema for free-form string maps such as Spark properties and query variables.
pub fn string_map(generator: &mut SchemaGenerator) -> Schema {
    let _ = generator;
    json_schema!({
        "type": "object",
        "maxProperties": 128,
        "additionalProperties": {"type": "string", "maxLength": MAX_ARG_LENGTH}
    })
}

/// Schema for `status.conditions`: the upstream `metav1.Condition` schema, declared a list-map keyed
/// by `type` so server-side apply merges conditions one by one instead of replacing the list.
pub fn conditions(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = <Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>::json_schema(generator);
    schema.insert("x-kubernetes-list-type".into(), json!("map"));
    schema.insert("x-kubernetes-list-map-keys".into(), json!(["type"]));
    schema.insert("maxItems".into(), json!(16));
    schema
}
