//! Drift between the node and the spec: the mutable fields the operator corrects with
//! `nodes.patch` (labels, metadata, tags) and the immutable ones it only reports.
//!
//! Does not touch Kubernetes or Google Cloud.

use tpu_operator_gcp::tpu_v2::model::Node;

use super::Input;

/// Immutable fields that differ between the node and the spec (the CRD refuses such edits; this
/// catches the ones that slipped through, and adopted nodes that do not match).
pub(super) fn immutable_drift(input: &Input<'_>, n: &Node) -> Option<String> {
    let mut out = Vec::new();
    if let Ok(shape) = input.shape {
        let want = shape.accelerator_type();
        if !n.accelerator_type.is_empty() && n.accelerator_type != want {
            out.push(format!(
                "acceleratorType is {} on the node, {want} in the spec",
                n.accelerator_type
            ));
        }
    }
    if !n.runtime_version.is_empty() && n.runtime_version != input.spec.runtime_version {
        out.push(format!(
            "runtimeVersion is {} on the node, {} in the spec",
            n.runtime_version, input.spec.runtime_version
        ));
    }
    (!out.is_empty()).then(|| {
        format!(
            "{} (not changed in place; recreate the TpuSlice to apply)",
            out.join("; ")
        )
    })
}
