//! Rules of `TrainingPipeline`: how its stages connect, its Vertex AI training job, and what is
//! fixed after creation. The preprocess and TPU VM stages reuse the batch and slice shape rules.

use super::batch::batch_shape_rules;
use super::slice::slice_shape_rules;
use crate::training_pipeline::placeholders;

use super::{PlacedRule, Rule, cel_list, immutable_here, immutable_optional, place};

/// Rules of a pipeline's `spec.training.vertex`: one program (container or Python package), and
/// a machine type, accelerator and topology Vertex AI accepts together.
fn vertex_training_rules() -> Vec<Rule> {
    let mut rules = vertex_program_rules();
    rules.extend(vertex_machine_rules());
    rules.extend(vertex_topology_rules());
    rules
}

/// One program (a container or a Python package), and the service account TensorBoard needs.
fn vertex_program_rules() -> Vec<Rule> {
    vec![
    Rule::new(
        "has(self.container) != has(self.pythonPackageSpec)",
        "set exactly one of training.vertex.container (a training image) and training.vertex.pythonPackageSpec (a Python package on a prebuilt Vertex image)",
    )
    .message_expression(
        "has(self.container) ? 'training.vertex.container and training.vertex.pythonPackageSpec are mutually exclusive: remove one' : 'set training.vertex.container (a training image) or training.vertex.pythonPackageSpec (a Python package on a prebuilt Vertex image)'",
    )
    .at(".container"),
    // Vertex AI TensorBoard with custom training requires a service account attached to
    // the job (https://cloud.google.com/vertex-ai/docs/experiments/tensorboard-setup).
    Rule::new(
        "!has(self.tensorboard) || has(self.serviceAccount)",
        "training.vertex.tensorboard needs training.vertex.serviceAccount: Vertex AI TensorBoard with custom training requires a service account attached to the job (one that can write to the TensorBoard and its bucket)",
    )
    .at(".tensorboard"),
    ]
}

/// `acceleratorType` and `acceleratorCount` as the machine type takes them: the legacy
/// `cloud-tpu` machine type is sized by both, TPU machine types by `tpuTopology`.
fn vertex_machine_rules() -> Vec<Rule> {
    vec![
    Rule::new(
        "self.machineType != 'cloud-tpu' || (has(self.acceleratorType) && self.acceleratorType in ['TPU_V2', 'TPU_V3'])",
        "machineType cloud-tpu takes acceleratorType TPU_V2 or TPU_V3; for newer TPUs use ct5lp-hightpu-* (v5e), ct5p-hightpu-4t (v5p) or ct6e-standard-* (v6e) with tpuTopology",
    )
    .at(".acceleratorType"),
    Rule::new(
        "self.machineType != 'cloud-tpu' || (has(self.acceleratorCount) && self.acceleratorCount == 8)",
        "machineType cloud-tpu takes acceleratorCount: 8 (one v2-8 / v3-8 board)",
    )
    .at(".acceleratorCount"),
    Rule::new(
        "self.machineType == 'cloud-tpu' || !has(self.acceleratorCount)",
        "acceleratorCount is only for machineType cloud-tpu: TPU machine types are sized by tpuTopology",
    )
    .at(".acceleratorCount"),
    Rule::new(
        "self.machineType == 'cloud-tpu' || !has(self.acceleratorType) || (self.machineType.startsWith('ct5lp-') && self.acceleratorType == 'TPU_V5_LITEPOD')",
        "acceleratorType does not match machineType: only ct5lp-hightpu-* takes TPU_V5_LITEPOD, and ct5p/ct6e machine types take none",
    )
    .message_expression(
        "'machineType ' + self.machineType + ' does not take acceleratorType ' + self.acceleratorType + ': only ct5lp-hightpu-* takes TPU_V5_LITEPOD, ct5p/ct6e machine types take none'",
    )
    .at(".acceleratorType"),
    ]
}

/// `tpuTopology`: required for TPU machine types, and a shape the machine type's chips per host allow.
fn vertex_topology_rules() -> Vec<Rule> {
    let multi = cel_list(&["2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"]);
    vec![
    Rule::new(
        "self.machineType == 'cloud-tpu' ? !has(self.tpuTopology) : has(self.tpuTopology)",
        "tpuTopology is required for TPU machine types and not allowed with cloud-tpu",
    )
    .message_expression(
        "self.machineType == 'cloud-tpu' ? 'machineType cloud-tpu takes no tpuTopology: size it with acceleratorCount' : 'machineType ' + self.machineType + ' requires tpuTopology (e.g. 2x2 for a 4t machine type)'",
    )
    .at(".tpuTopology"),
    Rule::new(
        "!has(self.tpuTopology) || !self.machineType.endsWith('-1t') || self.tpuTopology == '1x1'",
        "1-chip machine types (*-1t) take tpuTopology 1x1",
    )
    .message_expression(
        "'machineType ' + self.machineType + ' has 1 chip: tpuTopology must be 1x1 (got ' + self.tpuTopology + ')'",
    )
    .at(".tpuTopology"),
    Rule::new(
        "!has(self.tpuTopology) || !self.machineType.endsWith('-8t') || self.tpuTopology == '2x4'",
        "8-chip machine types (*-8t) take tpuTopology 2x4",
    )
    .message_expression(
        "'machineType ' + self.machineType + ' has 8 chips on one host: tpuTopology must be 2x4 (got ' + self.tpuTopology + ')'",
    )
    .at(".tpuTopology"),
    Rule::new(
        format!(
            "!has(self.tpuTopology) || !(self.machineType in ['ct5lp-hightpu-4t', 'ct6e-standard-4t']) || self.tpuTopology in {multi}"
        ),
        "4-chip machine types take tpuTopology 2x2 (one host) or 2x4, 4x4, 4x8, 8x8, 8x16, 16x16 (several hosts)",
    )
    .message_expression(
        "'machineType ' + self.machineType + ' has 4 chips per host: tpuTopology must be 2x2 (one host) or 2x4, 4x4, 4x8, 8x8, 8x16, 16x16 (got ' + self.tpuTopology + ')'",
    )
    .at(".tpuTopology"),
    Rule::new(
        "!has(self.tpuTopology) || self.machineType != 'ct5p-hightpu-4t' || (self.tpuTopology.matches('^[0-9]+x[0-9]+x[0-9]+$') && (int(self.tpuTopology.split('x')[0]) * int(self.tpuTopology.split('x')[1]) * int(self.tpuTopology.split('x')[2])) % 4 == 0)",
        "ct5p-hightpu-4t takes a 3-D tpuTopology whose chip count is a multiple of 4 (e.g. 2x2x1, 2x2x2)",
    )
    .at(".tpuTopology"),
    ]
}

/// Rules of `TrainingPipeline`.
pub fn training_pipeline_rules() -> Vec<PlacedRule> {
    const KIND: &str = "TrainingPipeline";
    let mut out = place("spec", preprocess_output_rules());
    out.extend(place("spec.artifacts", placeholder_rules()));
    out.extend(place("spec.training", vec![training_choice_rule()]));
    out.extend(batch_shape_rules("spec.preprocess"));
    out.extend(place("spec.training.vertex", vertex_training_rules()));
    out.extend(place(
        "spec.training.vertex.scheduling",
        vec![flex_start_wait_rule()],
    ));
    out.extend(slice_shape_rules("spec.training.tpuVm.slice"));
    out.extend(place(
        "spec.training.tpuVm.slice",
        vec![pipeline_runs_the_container_rule()],
    ));
    out.extend(place(
        "spec",
        ["project", "preprocess"]
            .iter()
            .map(|f| immutable_optional(KIND, f))
            .collect(),
    ));
    for f in ["region", "artifacts", "training"] {
        out.extend(place(&format!("spec.{f}"), vec![immutable_here(KIND, f)]));
    }
    // As batch/v1 Job's name, for the same reason: it is a label value on every child.
    out.extend(place("", vec![name_length_rule()]));
    out
}

/// The preprocess stage writes where training reads: `artifacts.processedData`.
fn preprocess_output_rules() -> Vec<Rule> {
    vec![
            Rule::new(
                "!has(self.preprocess) || has(self.artifacts.processedData)",
                "a preprocess stage writes to artifacts.processedData: set it (e.g. gs://bucket/processed/)",
            )
            .at(".artifacts.processedData"),
            Rule::new(
                "!has(self.preprocess) || !has(self.preprocess.outputUri) || (has(self.artifacts.processedData) && self.preprocess.outputUri == self.artifacts.processedData)",
                "in a pipeline the preprocess output is artifacts.processedData: omit preprocess.outputUri or make it equal",
            )
            .at(".preprocess.outputUri"),
    ]
}

/// Artifact URIs name only the placeholders the controller expands
/// ([`crate::training_pipeline::placeholders`]): a typo would otherwise become a directory.
fn placeholder_rules() -> Vec<Rule> {
    let pattern = placeholders::known_only_pattern();
    placeholders::FIELDS
        .iter()
        .map(|field| {
            Rule::new(
                format!("!has(self.{field}) || self.{field}.matches('{pattern}')"),
                placeholders::unknown_message(field),
            )
            .at(&format!(".{field}"))
        })
        .collect()
}

/// Exactly one training backend.
fn training_choice_rule() -> Rule {
    Rule::new(
            "has(self.vertex) != has(self.tpuVm)",
            "set exactly one of training.vertex (Vertex AI custom job) and training.tpuVm (TPU VM slice)",
        )
        .message_expression(
            "has(self.vertex) ? 'training.vertex and training.tpuVm are mutually exclusive: remove one' : 'set training.vertex (Vertex AI custom job) or training.tpuVm (TPU VM slice)'",
        )
        .at(".vertex")
}

/// `maxWaitDuration` bounds a FlexStart wait only.
fn flex_start_wait_rule() -> Rule {
    Rule::new(
        "!has(self.maxWaitDuration) || (has(self.strategy) && self.strategy == 'FlexStart')",
        "maxWaitDuration applies to strategy FlexStart only: remove it or set strategy: FlexStart",
    )
    .at(".maxWaitDuration")
}

/// A pipeline's slice runs the pipeline's container, not its own script or workload.
fn pipeline_runs_the_container_rule() -> Rule {
    Rule::new(
            "!has(self.startupScript) && !has(self.workload)",
            "the pipeline runs training.tpuVm.container on the slice: leave slice.startupScript and slice.workload empty",
        )
        .at(".workload")
}

/// The pipeline's name fits a label value.
fn name_length_rule() -> Rule {
    Rule::new(
        "self.metadata.name.size() <= 63",
        "metadata.name: a TrainingPipeline's name is at most 63 characters, because it is the value of the tpu-operator.dev/pipeline label on its PreprocessBatch and TpuSlice (label values are limited to 63); choose a shorter name",
    )
}
