//! Rules of a TPU slice: its shape (shared by `TpuSlice.spec` and a pipeline's
//! `training.tpuVm.slice`), what each provisioner supports, and what `TpuSlice` keeps immutable.

use super::{PlacedRule, Rule, cel_list, immutable_here, immutable_optional, join, place};
use crate::accelerator::TpuGeneration;

/// Shape rules of a TpuSlice spec, placed at `prefix` (the spec node) — shared by `TpuSlice.spec`
/// and `TrainingPipeline.spec.training.tpuVm.slice`.
pub(super) fn slice_shape_rules(prefix: &str) -> Vec<PlacedRule> {
    let mut out = place(prefix, spec_choice_rules());
    out.extend(place(
        &join(prefix, "acceleratorType"),
        vec![accelerator_type_size_rule()],
    ));
    out.extend(place(
        &join(prefix, "acceleratorConfig"),
        accelerator_config_rules(),
    ));
    out.extend(place(&join(prefix, "capacity"), vec![capacity_choice_rule()]));
    out.extend(place(prefix, provisioner_rules()));
    out.extend(place(&join(prefix, "capacity.queued"), queued_capacity_rules()));
    out.extend(capacity_plan_rules(prefix));
    out
}

/// `capacityPlan`: instead of `capacity`; each rung one kind (as `capacity`), the kinds the
/// provisioner offers, and a `waitFor` wherever a waiting kind would otherwise never move on.
fn capacity_plan_rules(prefix: &str) -> Vec<PlacedRule> {
    let plan = join(prefix, "capacityPlan");
    let rung = join(&plan, "rungs[]");
    let mut out = place(
        prefix,
        vec![
            Rule::new(
                "!(has(self.capacity) && has(self.capacityPlan))",
                "capacity and capacityPlan are mutually exclusive: put the one kind of capacity in a rung of capacityPlan, or remove capacityPlan",
            )
            .at(".capacityPlan"),
            Rule::new(
                format!("!{CE} || !has(self.capacityPlan) || self.capacityPlan.rungs.all(r, !has(r.queued))"),
                "capacityPlan: queued is a TPU API queued resource: with provisioner: ComputeEngine wait for capacity with a flexStart rung",
            )
            .at(".capacityPlan"),
            Rule::new(
                format!("{CE} || !has(self.capacityPlan) || self.capacityPlan.rungs.all(r, !has(r.flexStart))"),
                "capacityPlan: flexStart needs provisioner: ComputeEngine (the TPU API offers flex-start only in v2alpha1)",
            )
            .at(".capacityPlan"),
        ],
    );
    out.extend(place(&plan, vec![waiting_rungs_rule()]));
    out.extend(place(
        &rung,
        vec![Rule::new(
            ONE_CAPACITY_KIND,
            "set exactly one of onDemand, spot, reserved, queued, flexStart in each rung of capacityPlan",
        )],
    ));
    out.extend(place(&join(&rung, "queued"), queued_capacity_rules()));
    out
}

/// A rung of a waiting kind (reserved, queued, flex-start) with no `waitFor` would wait in its
/// first zone for ever: allowed only as the plan's very last zone.
fn waiting_rungs_rule() -> Rule {
    let unbounded = |r: &str| {
        format!("(!has({r}.waitFor) && (has({r}.reserved) || has({r}.queued) || has({r}.flexStart)))")
    };
    let last = "self.rungs[size(self.rungs) - 1]";
    Rule::new(
        format!(
            "size(self.rungs.filter(r, {})) == 0 || (size(self.rungs.filter(r, {})) == 1 && {} && (!has({last}.zones) || size({last}.zones) <= 1))",
            unbounded("r"),
            unbounded("r"),
            unbounded(last),
        ),
        "a reserved, queued or flexStart rung waits for capacity: set its waitFor (how long to wait in each of its zones before moving on); only the plan's last rung, with one zone, may wait without one",
    )
    .at(".rungs")
}

/// Exactly one member of a capacity object (`spec.capacity`, or a plan's rung) is set.
const ONE_CAPACITY_KIND: &str = "(has(self.onDemand) ? 1 : 0) + (has(self.spot) ? 1 : 0) + (has(self.reserved) ? 1 : 0) + (has(self.queued) ? 1 : 0) + (has(self.flexStart) ? 1 : 0) == 1";

/// One accelerator form (type or config), one way to run code (startup script or workload), and
/// none of the metadata keys the operator writes.
fn spec_choice_rules() -> Vec<Rule> {
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
            Rule::new(
                format!("(has(self.metadata) ? self.metadata.map(k, k.size() + self.metadata[k].size()).sum() : 0) + (has(self.startupScript) ? self.startupScript.size() : 0) < {MAX_NODE_METADATA}"),
                "metadata and startupScript together (keys and values) must stay under 512 KiB, Google's limit for a VM's metadata: keep large files in Cloud Storage and fetch them from the startup script",
            )
            .at(".metadata"),
    ]
}

/// Google's bound on all of a VM's metadata, keys and values together: "less than 512 KB"
/// (Compute Engine API reference, `Metadata.items`).
const MAX_NODE_METADATA: u32 = 512 * 1024;

/// `acceleratorConfig`: a topology of the type's rank, one of the fixed shapes where the
/// generation has them, and a whole number of 4-chip hosts within the generation's maximum.
fn accelerator_config_rules() -> Vec<Rule> {
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
    config_rules.push(host_chip_count_rule());
    config_rules
}

/// 3-D generations (V4, V5P, TPU7X) come in 4-chip hosts up to a maximum chip count.
fn host_chip_count_rule() -> Rule {
    let product = "int(self.topology.split('x')[0]) * int(self.topology.split('x')[1]) * int(self.topology.split('x')[2])";
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
        .at(".topology")
}

/// Exactly one kind of capacity.
fn capacity_choice_rule() -> Rule {
    Rule::new(
        ONE_CAPACITY_KIND,
        "set exactly one of capacity.onDemand, capacity.spot, capacity.reserved, capacity.queued, capacity.flexStart",
    )
}

/// `capacity.queued`: one way to bound the wait, and a minimum duration only where it applies.
fn queued_capacity_rules() -> Vec<Rule> {
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
    ]
}

/// What only one provisioner supports, refused naming the field (docs/compute-engine.md).
fn provisioner_rules() -> Vec<Rule> {
    let mut rules = backend_rules();
    rules.extend(multislice_and_adoption_rules());
    rules
}

/// A slice provisioned through Compute Engine (the other provisioner is the TPU API).
const CE: &str = "(has(self.provisioner) && self.provisioner == 'ComputeEngine')";

/// Each provisioner's VM image field, the generations Compute Engine has machine types for, and
/// the capacity kinds only one of them offers.
fn backend_rules() -> Vec<Rule> {
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
    ]
}

/// `multislice` and `adoptNodeId`: TPU API features that do not combine with each other.
fn multislice_and_adoption_rules() -> Vec<Rule> {
    vec![
        Rule::new(
            format!("!has(self.multislice) || !{CE}"),
            "multislice is Cloud TPU API queued resources, one per slice: set provisioner: TpuApi (or remove multislice)",
        )
        .at(".multislice"),
        Rule::new(
            "!has(self.multislice) || (has(self.capacity) && (has(self.capacity.queued) || has(self.capacity.reserved))) || (has(self.capacityPlan) && self.capacityPlan.rungs.all(r, has(r.queued) || has(r.reserved)))",
            "multislice is provisioned as queued resources, one per slice: set capacity.queued (or capacity.reserved) with it, or only queued and reserved rungs in capacityPlan",
        )
        .at(".multislice"),
        Rule::new(
            "!has(self.multislice) || self.multislice.nodeCount >= 2",
            "multislice.nodeCount must be at least 2: for one slice remove multislice",
        )
        .at(".multislice.nodeCount"),
        Rule::new(
            "!has(self.capacityPlan) || !has(self.adoptNodeId)",
            "adoptNodeId adopts one existing node where it is: it cannot be combined with capacityPlan",
        )
        .at(".adoptNodeId"),
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
            "capacityPlan",
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
