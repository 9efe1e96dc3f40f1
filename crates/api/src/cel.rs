//! CEL validation rules (`x-kubernetes-validations`), one table per kind.
//!
//! The rules live here rather than as scattered schemars attributes so each kind's admission
//! policy reads as one list. [`crate::crds`] places them into the generated schema at the listed
//! paths. Every rule names the offending field (`fieldPath`) and says how to fix it.
//!
//! Constraints honoured (see `tests` and the fixture suite):
//! - only CEL features that both a real kube-apiserver and `kube-cel` 0.8 (used by kube-emulator)
//!   support: `has`, `in`, `matches`, `startsWith`/`endsWith`, `split`, `int()`, `all`/`exists`
//!   on bounded maps, ternaries;
//! - every string / list / map a rule reads carries a maxLength / maxItems / maxProperties, so the
//!   API server's cost estimator accepts the CRD;
//! - transition rules (`oldSelf`) sit on non-list nodes, so they see the old value on updates.

use serde_json::{Map, Value, json};

use crate::accelerator::TpuGeneration;

/// One `x-kubernetes-validations` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The CEL expression; must evaluate to true for valid objects.
    pub rule: String,
    /// Static message (used when there is no `message_expression`).
    pub message: String,
    /// CEL expression producing the message (overrides `message` when it evaluates).
    pub message_expression: Option<String>,
    /// Path of the offending field relative to the node the rule sits on (e.g. `.zone`).
    pub field_path: Option<String>,
    /// `FieldValueForbidden` for immutability, else the API server default (FieldValueInvalid).
    pub reason: Option<&'static str>,
}

impl Rule {
    fn new(rule: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            rule: rule.into(),
            message: message.into(),
            message_expression: None,
            field_path: None,
            reason: None,
        }
    }

    fn at(mut self, field_path: &str) -> Self {
        self.field_path = Some(field_path.to_string());
        self
    }

    fn message_expression(mut self, expr: impl Into<String>) -> Self {
        self.message_expression = Some(expr.into());
        self
    }

    fn forbidden(mut self) -> Self {
        self.reason = Some("FieldValueForbidden");
        self
    }

    /// The JSON form that goes into the schema.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("rule".into(), json!(self.rule));
        m.insert("message".into(), json!(self.message));
        if let Some(e) = &self.message_expression {
            m.insert("messageExpression".into(), json!(e));
        }
        if let Some(p) = &self.field_path {
            m.insert("fieldPath".into(), json!(p));
        }
        if let Some(r) = self.reason {
            m.insert("reason".into(), json!(r));
        }
        Value::Object(m)
    }
}

/// A rule and the schema node it belongs to: a dotted path from the resource root (`spec.capacity`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedRule {
    /// Dotted property path from the root of the resource schema.
    pub path: String,
    /// The rule.
    pub rule: Rule,
}

fn place(path: &str, rules: Vec<Rule>) -> Vec<PlacedRule> {
    rules
        .into_iter()
        .map(|rule| PlacedRule {
            path: path.to_string(),
            rule,
        })
        .collect()
}

fn join(prefix: &str, rel: &str) -> String {
    if rel.is_empty() {
        prefix.to_string()
    } else {
        format!("{prefix}.{rel}")
    }
}

fn cel_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("'{i}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// `field` may not change after creation, including being added or removed.
fn immutable_optional(kind: &str, field: &str) -> Rule {
    Rule::new(
        format!("has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || self.{field} == oldSelf.{field})"),
        format!("{field} is immutable after creation: delete and recreate the {kind} to change it"),
    )
    .at(&format!(".{field}"))
    .forbidden()
}

/// `field` (required) may not change after creation; rule sits on the field itself.
fn immutable_here(kind: &str, field: &str) -> Rule {
    Rule::new(
        "self == oldSelf",
        format!("{field} is immutable after creation: delete and recreate the {kind} to change it"),
    )
    .forbidden()
}

/// Shape rules of a TpuSlice spec, placed at `prefix` (the spec node) — shared by `TpuSlice.spec`
/// and `TrainingPipeline.spec.training.tpuVm.slice`.
fn slice_shape_rules(prefix: &str) -> Vec<PlacedRule> {
    let mut out = place(
        prefix,
        vec![
            Rule::new(
                "has(self.acceleratorType) != has(self.acceleratorConfig)",
                "set exactly one of acceleratorType (e.g. v6e-8) and acceleratorConfig ({type, topology})",
            )
            .message_expression(
                "has(self.acceleratorType) ? 'acceleratorType and acceleratorConfig are mutually exclusive: remove one of them' : 'set acceleratorType (e.g. v6e-8) or acceleratorConfig ({type: V6E, topology: 2x4})'",
            )
            .at(".acceleratorType"),
            Rule::new(
                "!(has(self.startupScript) && has(self.workload))",
                "startupScript and workload are mutually exclusive: the operator renders the startup script that runs the workload container",
            )
            .at(".workload"),
            Rule::new(
                "!has(self.metadata) || self.metadata.all(k, k != 'startup-script' && !k.startsWith('tpu-operator-'))",
                "metadata keys 'startup-script' and 'tpu-operator-*' are reserved: use startupScript or workload instead",
            )
            .at(".metadata"),
        ],
    );
    out.extend(place(
        &join(prefix, "acceleratorType"),
        vec![accelerator_type_size_rule()],
    ));
    let mut config_rules = vec![
        Rule::new(
            "self.type in ['V4', 'V5P', 'TPU7X'] ? self.topology.matches('^[0-9]+x[0-9]+x[0-9]+$') : self.topology.matches('^[0-9]+x[0-9]+$')",
            "V4, V5P and TPU7X take 3-D topologies (e.g. 2x2x1); V2, V3, V5LITE_POD and V6E take 2-D ones (e.g. 2x4)",
        )
        .message_expression(
            "'topology ' + self.topology + ' does not fit type ' + self.type + ': V4, V5P and TPU7X take 3-D topologies (e.g. 2x2x1), V2, V3, V5LITE_POD and V6E 2-D ones (e.g. 2x4)'",
        )
        .at(".topology"),
    ];
    for generation in TpuGeneration::ALL {
        let Some((_, topologies)) = generation.fixed_sizes() else {
            continue;
        };
        let name = generation.api_name();
        config_rules.push(
            Rule::new(
                format!(
                    "self.type != '{name}' || self.topology in {}",
                    cel_list(topologies)
                ),
                format!("{name} slices have the topologies {}", topologies.join(", ")),
            )
            .message_expression(format!(
                "'topology ' + self.topology + ' is not a {name} slice: use one of {}'",
                topologies.join(", ")
            ))
            .at(".topology"),
        );
    }
    let product = "int(self.topology.split('x')[0]) * int(self.topology.split('x')[1]) * int(self.topology.split('x')[2])";
    config_rules.push(
        Rule::new(
            format!(
                "!(self.type in ['V4', 'V5P', 'TPU7X']) || !self.topology.matches('^[0-9]+x[0-9]+x[0-9]+$') || (({product}) % 4 == 0 && ({product}) <= (self.type == 'V4' ? {} : self.type == 'V5P' ? {} : {}))",
                TpuGeneration::V4.max_chips(),
                TpuGeneration::V5p.max_chips(),
                TpuGeneration::Tpu7x.max_chips()
            ),
            format!(
                "V4, V5P and TPU7X hosts carry 4 chips: the topology's chip count (product of its dimensions) must be a multiple of 4, e.g. 2x2x1 or 2x2x2, and at most {} (V4) / {} (V5P) / {} (TPU7X)",
                TpuGeneration::V4.max_chips(),
                TpuGeneration::V5p.max_chips(),
                TpuGeneration::Tpu7x.max_chips()
            ),
        )
        .at(".topology"),
    );
    out.extend(place(&join(prefix, "acceleratorConfig"), config_rules));
    out.extend(place(
        &join(prefix, "capacity"),
        vec![Rule::new(
            "(has(self.onDemand) ? 1 : 0) + (has(self.spot) ? 1 : 0) + (has(self.reserved) ? 1 : 0) + (has(self.queued) ? 1 : 0) + (has(self.flexStart) ? 1 : 0) == 1",
            "set exactly one of capacity.onDemand, capacity.spot, capacity.reserved, capacity.queued, capacity.flexStart",
        )],
    ));
    out.extend(place(prefix, provisioner_rules()));
    out.extend(place(
        &join(prefix, "capacity.queued"),
        vec![
            Rule::new(
                "!(has(self.validUntilDuration) && has(self.validUntilTime))",
                "validUntilDuration and validUntilTime are mutually exclusive: set one",
            )
            .at(".validUntilTime"),
            Rule::new(
                "!(has(self.minDuration) && has(self.tier) && self.tier == 'Spot')",
                "minDuration applies to the Guaranteed tier only: remove it or set tier: Guaranteed",
            )
            .at(".minDuration"),
        ],
    ));
    out
}

/// What only one provisioner supports, refused naming the field (docs/compute-engine.md).
fn provisioner_rules() -> Vec<Rule> {
    const CE: &str = "(has(self.provisioner) && self.provisioner == 'ComputeEngine')";
    let families: Vec<&str> = TpuGeneration::COMPUTE_ENGINE.iter().map(|g| g.prefix()).collect();
    let types: Vec<&str> = TpuGeneration::COMPUTE_ENGINE
        .iter()
        .map(|g| g.api_name())
        .collect();
    vec![
        Rule::new(
            format!("{CE} == has(self.computeEngine)"),
            "computeEngine (the VM image) is required with provisioner: ComputeEngine and not allowed with provisioner: TpuApi",
        )
        .at(".computeEngine"),
        Rule::new(
            format!("{CE} ? !has(self.runtimeVersion) : has(self.runtimeVersion)"),
            "runtimeVersion is the TPU API's VM image: required with provisioner: TpuApi; with provisioner: ComputeEngine remove it and set computeEngine.image",
        )
        .at(".runtimeVersion"),
        Rule::new(
            format!(
                "!{CE} || (has(self.acceleratorType) ? self.acceleratorType.split('-')[0] in {} : has(self.acceleratorConfig) && self.acceleratorConfig.type in {})",
                cel_list(&families),
                cel_list(&types)
            ),
            format!(
                "Compute Engine has TPU machine types for {} only: use provisioner: TpuApi for other generations",
                families.join(", ")
            ),
        )
        .at(".provisioner"),
        Rule::new(
            format!(
                "{CE} || (has(self.acceleratorType) ? !self.acceleratorType.startsWith('tpu7x-') : !has(self.acceleratorConfig) || self.acceleratorConfig.type != 'TPU7X')"
            ),
            "TPU7x is provisioned only through Compute Engine: set provisioner: ComputeEngine and computeEngine.image",
        )
        .at(".provisioner"),
        Rule::new(
            format!("!{CE} || !has(self.capacity) || !has(self.capacity.queued)"),
            "capacity.queued is a TPU API queued resource: with provisioner: ComputeEngine wait for capacity with capacity.flexStart",
        )
        .at(".capacity"),
        Rule::new(
            format!("{CE} || !has(self.capacity) || !has(self.capacity.flexStart)"),
            "capacity.flexStart needs provisioner: ComputeEngine (the TPU API offers flex-start only in v2alpha1)",
        )
        .at(".capacity"),
        Rule::new(
            format!("!has(self.multislice) || !{CE}"),
            "multislice is one Cloud TPU API queued resource with multisliceParams: set provisioner: TpuApi (or remove multislice)",
        )
        .at(".multislice"),
        Rule::new(
            "!has(self.multislice) || (has(self.capacity) && (has(self.capacity.queued) || has(self.capacity.reserved)))",
            "multislice is provisioned as one queued resource: set capacity.queued (or capacity.reserved) with it",
        )
        .at(".multislice"),
        Rule::new(
            "!has(self.multislice) || self.multislice.nodeCount >= 2",
            "multislice.nodeCount must be at least 2: for one slice remove multislice",
        )
        .at(".multislice.nodeCount"),
        Rule::new(
            "!has(self.multislice) || !has(self.adoptNodeId)",
            "adoptNodeId adopts one existing node: it cannot be combined with multislice",
        )
        .at(".adoptNodeId"),
        Rule::new(
            format!("!{CE} || !has(self.adoptNodeId)"),
            "adoptNodeId adopts Cloud TPU API nodes: it is not supported with provisioner: ComputeEngine",
        )
        .at(".adoptNodeId"),
    ]
}

/// `acceleratorType` sizes per generation, generated from [`TpuGeneration`] so CEL and
/// [`crate::accelerator::parse_accelerator_type`] agree (the schema test checks they do).
fn accelerator_type_size_rule() -> Rule {
    let n = "self.split('-')[1]";
    let mut expr = String::new();
    let mut help = Vec::new();
    for generation in TpuGeneration::ALL {
        let prefix = generation.prefix();
        let scale = if generation.suffix_counts_cores() { 2 } else { 1 };
        if let Some((sizes, _)) = generation.fixed_sizes() {
            let allowed: Vec<String> = sizes.iter().map(|c| (c * scale).to_string()).collect();
            let refs: Vec<&str> = allowed.iter().map(String::as_str).collect();
            expr.push_str(&format!(
                "self.startsWith('{prefix}-') ? {n} in {} : ",
                cel_list(&refs)
            ));
            help.push(format!("{prefix}-N: N = {}", allowed.join(", ")));
        }
    }
    let cores = |g: TpuGeneration| {
        format!(
            "(int({n}) >= 8 && int({n}) % 8 == 0 && int({n}) <= {})",
            g.max_chips() * 2
        )
    };
    expr.push_str(&format!(
        "self.startsWith('v4-') ? {} : self.startsWith('tpu7x-') ? {} : {}",
        cores(TpuGeneration::V4),
        cores(TpuGeneration::Tpu7x),
        cores(TpuGeneration::V5p)
    ));
    for g in [TpuGeneration::V4, TpuGeneration::V5p, TpuGeneration::Tpu7x] {
        help.push(format!(
            "{}-N: N = TensorCores, a multiple of 8 up to {}",
            g.prefix(),
            g.max_chips() * 2
        ));
    }
    let help = help.join("; ");
    Rule::new(expr, format!("not a TPU size ({help})")).message_expression(format!(
        "'acceleratorType ' + self + ' is not a TPU size ({help})'"
    ))
}

/// Shape rules of a Dataproc batch workload placed at `prefix` — shared by `PreprocessBatch.spec`
/// (flattened) and `TrainingPipeline.spec.preprocess`.
fn batch_shape_rules(prefix: &str) -> Vec<PlacedRule> {
    let mut out = place(
        prefix,
        vec![Rule::new(
            "(has(self.pyspark) ? 1 : 0) + (has(self.spark) ? 1 : 0) + (has(self.sparkSql) ? 1 : 0) + (has(self.sparkR) ? 1 : 0) == 1",
            "set exactly one of pyspark, spark, sparkSql and sparkR",
        )
        .message_expression(
            // Static strings only: a real kube-apiserver estimates `string(int)` as unbounded, and
            // concatenating it put the whole CRD over the CEL cost budget (it refused the CRD).
            "(has(self.pyspark) ? 1 : 0) + (has(self.spark) ? 1 : 0) + (has(self.sparkSql) ? 1 : 0) + (has(self.sparkR) ? 1 : 0) == 0 ? 'set one of pyspark, spark, sparkSql and sparkR: none is set' : 'pyspark, spark, sparkSql and sparkR are mutually exclusive: set only one of them'",
        )],
    );
    out.extend(place(
        &join(prefix, "spark"),
        vec![
            Rule::new(
                "has(self.mainJarFileUri) != has(self.mainClass)",
                "set exactly one of spark.mainJarFileUri and spark.mainClass",
            )
            .at(".mainClass"),
        ],
    ));
    out.extend(place(
        &join(prefix, "execution"),
        vec![
            Rule::new(
                "!(has(self.subnetworkUri) && has(self.networkUri))",
                "subnetworkUri and networkUri are mutually exclusive (Dataproc takes one): set one",
            )
            .at(".networkUri"),
        ],
    ));
    out.extend(place(
        &join(prefix, "runtime"),
        vec![Rule::new(
            "!has(self.properties) || !self.properties.exists(k, k.startsWith('spark.tpuoperator.'))",
            "Spark properties 'spark.tpuoperator.*' are reserved: the operator sets spark.tpuoperator.outputUri from outputUri",
        )
        .at(".properties")],
    ));
    out
}

/// Rules of `TpuSlice`.
pub fn tpu_slice_rules() -> Vec<PlacedRule> {
    const KIND: &str = "TpuSlice";
    let mut out = slice_shape_rules("spec");
    out.extend(place("spec.zone", vec![immutable_here(KIND, "zone")]));
    out.extend(place(
        "spec",
        [
            "project",
            "acceleratorType",
            "acceleratorConfig",
            "capacity",
            "serviceAccount",
            "adoptNodeId",
            "runtimeVersion",
            "provisioner",
            "computeEngine",
            "multislice",
        ]
        .iter()
        .map(|f| immutable_optional(KIND, f))
        .collect(),
    ));
    // A managed instance group's VMs come from an instance template, which Compute Engine never
    // changes in place: on that backend what the template carries is fixed at creation.
    out.extend(place(
        "spec",
        ["labels", "metadata", "startupScript", "workload"]
            .iter()
            .map(|f| {
                Rule::new(
                    format!("!(has(self.provisioner) && self.provisioner == 'ComputeEngine') || (has(self.{f}) == has(oldSelf.{f}) && (!has(self.{f}) || self.{f} == oldSelf.{f}))"),
                    format!("{f} is immutable with provisioner: ComputeEngine (the VMs come from an instance template): delete and recreate the TpuSlice to change it"),
                )
                .at(&format!(".{f}"))
                .forbidden()
            })
            .collect(),
    ));
    out.extend(place(
        "spec",
        ["network", "subnetwork"]
            .iter()
            .map(|f| {
                let value = |o: &str| {
                    format!("(has({o}.networkConfig) && has({o}.networkConfig.{f}) ? {o}.networkConfig.{f} : '')")
                };
                Rule::new(
                    format!("{} == {}", value("self"), value("oldSelf")),
                    format!("networkConfig.{f} is immutable after creation: delete and recreate the TpuSlice to change it"),
                )
                .at(&format!(".networkConfig.{f}"))
                .forbidden()
            })
            .collect(),
    ));
    out
}

/// Rules of `PreprocessBatch`.
pub fn preprocess_batch_rules() -> Vec<PlacedRule> {
    const KIND: &str = "PreprocessBatch";
    let mut out = batch_shape_rules("spec");
    out.extend(place("spec.region", vec![immutable_here(KIND, "region")]));
    out.extend(place(
        "spec",
        [
            "project",
            "pyspark",
            "spark",
            "sparkSql",
            "sparkR",
            "runtime",
            "execution",
            "labels",
            "inputs",
            "outputUri",
            "maxRetries",
        ]
        .iter()
        .map(|f| immutable_optional(KIND, f))
        .collect(),
    ));
    out
}

/// Rules of a pipeline's `spec.training.vertex`: one program (container or Python package), and
/// a machine type, accelerator and topology Vertex AI accepts together.
fn vertex_training_rules() -> Vec<Rule> {
    let multi = cel_list(&["2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"]);
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
    let mut out = place(
        "spec",
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
        ],
    );
    out.extend(place(
        "spec.training",
        vec![Rule::new(
            "has(self.vertex) != has(self.tpuVm)",
            "set exactly one of training.vertex (Vertex AI custom job) and training.tpuVm (TPU VM slice)",
        )
        .message_expression(
            "has(self.vertex) ? 'training.vertex and training.tpuVm are mutually exclusive: remove one' : 'set training.vertex (Vertex AI custom job) or training.tpuVm (TPU VM slice)'",
        )
        .at(".vertex")],
    ));
    out.extend(batch_shape_rules("spec.preprocess"));
    out.extend(place("spec.training.vertex", vertex_training_rules()));
    out.extend(place(
        "spec.training.vertex.scheduling",
        vec![
            Rule::new(
                "!has(self.maxWaitDuration) || (has(self.strategy) && self.strategy == 'FlexStart')",
                "maxWaitDuration applies to strategy FlexStart only: remove it or set strategy: FlexStart",
            )
            .at(".maxWaitDuration"),
        ],
    ));
    out.extend(slice_shape_rules("spec.training.tpuVm.slice"));
    out.extend(place(
        "spec.training.tpuVm.slice",
        vec![Rule::new(
            "!has(self.startupScript) && !has(self.workload)",
            "the pipeline runs training.tpuVm.container on the slice: leave slice.startupScript and slice.workload empty",
        )
        .at(".workload")],
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
    out.extend(place(
        "",
        vec![Rule::new(
            "self.metadata.name.size() <= 63",
            "metadata.name: a TrainingPipeline's name is at most 63 characters, because it is the value of the tpu-operator.dev/pipeline label on its PreprocessBatch and TpuSlice (label values are limited to 63); choose a shorter name",
        )],
    ));
    out
}

/// The rules of a kind by its name.
/// A policy that selects nothing is a mistake, not a harmless no-op.
pub fn tpu_policy_rules() -> Vec<PlacedRule> {
    place(
        "spec",
        vec![Rule::new(
            "has(self.namespaces) || has(self.namespaceSelector)",
            "select namespaces: set spec.namespaces (names, `team-*` prefixes, `*`) or spec.namespaceSelector ({} selects every namespace)",
        )],
    )
}

pub fn rules_for_kind(kind: &str) -> Vec<PlacedRule> {
    match kind {
        "TpuSlice" => tpu_slice_rules(),
        "PreprocessBatch" => preprocess_batch_rules(),
        "TrainingPipeline" => training_pipeline_rules(),
        "TpuPolicy" => tpu_policy_rules(),
        _ => Vec::new(),
    }
}
