//! Enum names to their numbers, for the wire forms that carry enums as integers (operations
//! included, through their `Any` payloads).

use super::*;

/// Rewrites enum names as numbers in a stored value of type `schema_name` (used when the request
/// asked for `$alt=json;enum-encoding=int`).
pub fn enums_to_int(svc: Svc, schema_name: &str, v: &mut Value) {
    let props = schema(svc, schema_name);
    let Value::Object(obj) = v else { return };
    for (k, val) in obj.iter_mut() {
        if let Some(p) = props.get(k) {
            prop_to_int(svc, p, val);
        }
    }
}

fn prop_to_int(svc: Svc, p: &Prop, v: &mut Value) {
    if let Some(r) = &p.reference {
        enums_to_int(svc, r, v);
        return;
    }
    if let Some(nums) = &p.nums {
        if let Value::String(s) = v
            && let Some(n) = nums.get(s.as_str())
        {
            *v = Value::from(*n);
        }
        if let Value::Array(items) = v {
            for it in items {
                prop_to_int(svc, p, it);
            }
        }
        return;
    }
    match v {
        Value::Array(items) => {
            if let Some(ip) = p.items.as_deref() {
                items.iter_mut().for_each(|it| prop_to_int(svc, ip, it));
            }
        }
        Value::Object(m) => {
            if let Some(ap) = p.additional.as_deref() {
                m.values_mut().for_each(|it| prop_to_int(svc, ap, it));
            }
        }
        _ => {}
    }
}

/// The message type behind an `Any`'s `@type`, for the types that carry enums.
fn any_schema(type_url: &str) -> Option<(Svc, &'static str)> {
    Some(match type_url.strip_prefix("type.googleapis.com/")? {
        "google.cloud.tpu.v2.Node" => (Svc::Tpu, "Node"),
        // The maintenance operations' response (its fields here are those of v2's Node).
        "google.cloud.tpu.v2alpha1.Node" => (Svc::Tpu, "Node"),
        "google.cloud.tpu.v2.QueuedResource" => (Svc::Tpu, "QueuedResource"),
        "google.cloud.dataproc.v1.Batch" => (Svc::Dataproc, "Batch"),
        "google.cloud.dataproc.v1.BatchOperationMetadata" => (Svc::Dataproc, "BatchOperationMetadata"),
        "google.cloud.aiplatform.v1.CustomJob" => (Svc::Vertex, "GoogleCloudAiplatformV1CustomJob"),
        _ => return None,
    })
}

/// Rewrites enums inside an Operation's `metadata` and `response` (typed by their `@type`).
pub fn operation_enums_to_int(op: &mut Value) {
    for key in ["metadata", "response"] {
        if let Some(any) = op.get_mut(key) {
            let url = any
                .get("@type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if let Some((svc, name)) = any_schema(&url) {
                enums_to_int(svc, name, any);
            }
        }
    }
}
