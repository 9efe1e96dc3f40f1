//! `TpuPolicy`: what the namespaces it selects may make the operator do in Google Cloud.
//!
//! Cluster-scoped, so only cluster administrators write it and every tenant can read it
//! (`kubectl get tpupolicies` shows each selected namespace's chips, spend and refusals). Every
//! policy that selects a namespace applies to it: an object must pass all of them (the most
//! restrictive wins). The controllers enforce every rule before any cloud call; the chart's
//! ValidatingAdmissionPolicy (see [`crate::admission`]) refuses at `kubectl apply` what the object
//! alone decides. Reference: `docs/policy.md`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::{MAX_LIST_ITEMS, PROJECT_ID};

mod budget;
mod status;
pub use budget::{Budget, BudgetAction, BudgetActionKind, BudgetPeriod, BudgetUsage, NextBudgetAction};
pub use status::{NamespaceUsage, TpuPolicyStatus, cents};

/// How capacity is paid for, as policies and prices name it. Reserved and queued (guaranteed)
/// capacity are priced as on-demand (a reservation's price depends on its commitment, which the
/// operator cannot see); queued spot is priced as spot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CapacityKind {
    OnDemand,
    Spot,
    Reserved,
    Queued,
}

impl CapacityKind {
    pub const ALL: [CapacityKind; 4] = [Self::OnDemand, Self::Spot, Self::Reserved, Self::Queued];

    /// The camelCase name used in policies, the config and messages (`onDemand`, `spot`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnDemand => "onDemand",
            Self::Spot => "spot",
            Self::Reserved => "reserved",
            Self::Queued => "queued",
        }
    }
}

/// TPU family names a policy may list (`v5litepod` is `v5e`'s name in accelerator types).
pub const FAMILY: &str = "^(v2|v3|v4|v5e|v5litepod|v5p|v6e|tpu7x)$";
/// A namespace name, or a prefix ending in `*`.
pub const NAMESPACE_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\*?$|^\*$";

/// Limits on what the selected namespaces may use in Google Cloud.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tpu-operator.dev",
    version = "v1beta1",
    kind = "TpuPolicy",
    status = "TpuPolicyStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "tpupol",
    doc = "What the namespaces a policy selects may make tpu-operator do in Google Cloud: projects, locations, TPU families and sizes, capacity kinds, identities, networks, adoption, chip quota and spend budgets. Every policy selecting a namespace applies (the most restrictive wins). Status shows each selected namespace's live usage.",
    printcolumn(
        name = "Namespaces",
        type_ = "integer",
        json_path = ".status.selectedNamespaces"
    ),
    printcolumn(name = "Chips", type_ = "integer", json_path = ".status.chips"),
    printcolumn(name = "Max Chips", type_ = "integer", json_path = ".spec.maxChips"),
    printcolumn(name = "USD/h", type_ = "number", json_path = ".status.spendPerHourUsd"),
    printcolumn(name = "Max USD/h", type_ = "number", json_path = ".spec.maxSpendPerHourUsd"),
    printcolumn(name = "Refused", type_ = "integer", json_path = ".status.refused"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct TpuPolicySpec {
    /// Namespaces by name; an entry ending in `*` selects every namespace with that prefix
    /// (`team-*`), `*` alone every namespace. A namespace is selected when it is named here or
    /// matches `namespaceSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 64), regex(pattern = NAMESPACE_PATTERN)))]
    pub namespaces: Option<Vec<String>>,
    /// Namespaces by label, as in a NetworkPolicy: `{}` selects every namespace, absent selects
    /// none (beyond `namespaces`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// Project for objects that name none (before the operator-wide `project`). When several
    /// policies select a namespace, the first by name that sets one gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30), regex(pattern = PROJECT_ID))]
    pub default_project: Option<String>,
    /// GCP projects objects may use (`*` at the end: prefix). Absent: any; empty: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(min = 1, max = 64)))]
    pub allowed_projects: Option<Vec<String>>,
    /// Regions: Dataproc batches, Vertex jobs, and the region of a TPU zone (`*` at the end:
    /// prefix, e.g. `us-*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(min = 1, max = 64)))]
    pub allowed_regions: Option<Vec<String>>,
    /// TPU zones (`*` at the end: prefix, e.g. `us-east5-*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(min = 1, max = 64)))]
    pub allowed_zones: Option<Vec<String>>,
    /// TPU families and the largest slice of each, in chips (of a TpuSlice, or all replicas of
    /// a Vertex job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub allowed_accelerators: Option<Vec<AcceleratorRule>>,
    /// Capacity kinds: `onDemand`, `spot`, `reserved`, `queued`. A TpuSlice's
    /// `capacity.flexStart` is `queued`; a Vertex job is `spot` with `scheduling.strategy: Spot`,
    /// `queued` with `FlexStart`, else `onDemand` (at apply and in the controller alike).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4))]
    pub allowed_capacity: Option<Vec<CapacityKind>>,
    /// TPU chips each selected namespace may hold at once (slices running or being created,
    /// Vertex TPU jobs of running pipelines). Per namespace, as a ResourceQuota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_chips: Option<u32>,
    /// Budget per selected namespace: estimated US dollars per hour of everything it runs. New
    /// TPU slices and Vertex jobs that would exceed it are refused; running ones keep running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_spend_per_hour_usd: Option<f64>,
    /// Spend budgets per selected namespace and calendar period (`Day`, `Week`, `Month`, UTC),
    /// each with actions at thresholds: `Notify`, `SpotOnly`, `RefuseNewWork`,
    /// `SuspendAtCheckpoint`. Status shows each
    /// namespace's spend, the actions in force and the next one (`status.budgets`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "budget::budgets_schema")]
    pub budgets: Option<Vec<Budget>>,
    /// Estimated US dollars per hour of any one object (TpuSlice, Vertex job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_object_spend_per_hour_usd: Option<f64>,
    /// Whether a `TpuSlice` may take over an existing TPU node (`spec.adoptNodeId`). Default
    /// `false`. An allowed adoption is checked like a create, against the node as the cloud
    /// reports it; a node carrying another owner's `tpu-operator-*` labels is never adopted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_adoption: bool,
    /// Whether objects may set `deletionPolicy: Orphan`, leaving their TPU node, Dataproc batch or
    /// Vertex job running (and billing) after the object is deleted. Default `false`: a namespace
    /// a policy governs cannot free its quota and budget by deleting an object whose cloud
    /// resources keep running. Checked when the object is created and again when it is deleted:
    /// an `Orphan` set after admission, or allowed once and no longer, is deleted like `Delete`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_orphan: bool,
    /// Google service accounts workloads may run as: TPU VMs (`serviceAccount.email`), Dataproc
    /// batches (`execution.serviceAccount`) and Vertex jobs (`serviceAccount`). E-mails,
    /// `*@<project>.iam.gserviceaccount.com` suffix patterns (a leading `*`), or `default`: an
    /// object naming none runs as the service's default identity, which must be listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 254), regex(pattern = SERVICE_ACCOUNT_PATTERN)))]
    pub allowed_service_accounts: Option<Vec<String>>,
    /// VPC networks: names (in the object's own project) or full paths
    /// (`projects/<p>/global/networks/<n>`), `*` at the end for a prefix. A TPU slice or
    /// Dataproc batch naming none uses its project's `default` network, which must be allowed; a
    /// Vertex job without `network` is peered with none and is not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 256), regex(pattern = NETWORK_PATTERN)))]
    pub allowed_networks: Option<Vec<String>>,
    /// Subnetworks: names (in the object's project and region) or full paths
    /// (`projects/<p>/regions/<r>/subnetworks/<s>`), `*` at the end for a prefix. Checked when an
    /// object names a subnetwork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 256), regex(pattern = NETWORK_PATTERN)))]
    pub allowed_subnetworks: Option<Vec<String>>,
    /// TPU reservations objects may consume (`capacity.reserved.reservationName`,
    /// `capacity.queued.reservationName`): names (in the object's own project and zone) or full
    /// paths (`projects/<p>/locations/<zone>/reservations/<r>`), `*` at the end for a prefix.
    /// Absent: a reservation is allowed when its project is one of `allowedProjects` (a short name
    /// is in the object's project); set, it alone decides, so a platform team can share
    /// reservations from a project the tenants may not otherwise use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 256), regex(pattern = NETWORK_PATTERN)))]
    pub allowed_reservations: Option<Vec<String>>,
    /// Projects whose boot images a Compute Engine slice may use (`computeEngine.image`), `*` at
    /// the end for a prefix. Absent: the object's own project and Google's public
    /// `ubuntu-os-cloud`; set, exactly these. The operator's identity creates the instances, so
    /// an image it can read in any project would otherwise boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 128), regex(pattern = PROJECT_PATTERN)))]
    pub allowed_image_projects: Option<Vec<String>>,
    /// Cloud Storage buckets objects may name (every `gs://` URI in a spec: inputs, outputs,
    /// scripts, packages, `modelDir`, `checkpointDir`, args and env values; a Dataproc staging
    /// bucket), `*` at the end for a prefix; `*` alone: every bucket. The operator reads some of
    /// them (an input's existence, `_SUCCESS` / `_FAILED` markers, checkpoints) as the
    /// namespace's `googleServiceAccount`, else with its own identity, so without that account a
    /// namespace naming another team's bucket would learn about its objects. Absent: no bucket,
    /// unless a policy selecting the namespace sets `googleServiceAccount` (then IAM decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 223), regex(pattern = BUCKET_PATTERN)))]
    pub allowed_buckets: Option<Vec<String>>,
    /// The Google service account the operator acts as for the selected namespaces (as Config
    /// Connector's namespaced mode binds one per namespace): every Cloud Storage read it makes
    /// for their objects (declared inputs, outputs, checkpoints, completion markers) uses a token
    /// of this account, minted by impersonation, so IAM decides which buckets a team reaches and
    /// audit logs name the team. The operator's own account needs
    /// `roles/iam.serviceAccountTokenCreator` on it. Without it (and without `allowedBuckets`), a
    /// policy refuses every Cloud Storage location: the operator would read it as itself. When
    /// several policies select a namespace, they must not name different accounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 254), regex(pattern = GOOGLE_SERVICE_ACCOUNT_PATTERN))]
    pub google_service_account: Option<String>,
}

/// A Google service account's e-mail (`name@project.iam.gserviceaccount.com`, or a
/// Google-managed `…@….gserviceaccount.com`).
pub const GOOGLE_SERVICE_ACCOUNT_PATTERN: &str = r"^[a-z0-9][-a-z0-9]*@[-a-z0-9.]+\.gserviceaccount\.com$";

/// `default`, an e-mail, or `*@domain`.
pub const SERVICE_ACCOUNT_PATTERN: &str = r"^(default|\*?[a-zA-Z0-9._%+-]*@[a-zA-Z0-9-]+\.[a-zA-Z0-9.-]+)$";
/// A name or path with `*` only at the end.
pub const NETWORK_PATTERN: &str = r"^[^*]+\*?$";
/// A project id (or domain-scoped id) with an optional `*` at the end.
pub const PROJECT_PATTERN: &str = r"^[a-z0-9][-a-z0-9.:]*\*?$";
/// A bucket name with an optional `*` at the end, or `*` alone (every bucket).
pub const BUCKET_PATTERN: &str = r"^([a-z0-9][-a-z0-9_.]*\*?|\*)$";

/// One allowed TPU family.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcceleratorRule {
    /// `v2`, `v3`, `v4`, `v5e` (or `v5litepod`), `v5p`, `v6e`, `tpu7x`.
    #[schemars(regex(pattern = FAMILY))]
    pub family: String,
    /// Largest slice in chips (absent: any size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_chips: Option<u32>,
}

impl TpuPolicySpec {
    /// Whether this policy selects the namespace `name` with `labels`.
    pub fn selects(&self, name: &str, labels: &std::collections::BTreeMap<String, String>) -> bool {
        let named = self
            .namespaces
            .iter()
            .flatten()
            .any(|n| match n.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => n == name,
            });
        named
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|s| selector_matches(s, labels))
    }
}

/// A LabelSelector against a label map (`{}` matches everything). An unknown operator matches
/// nothing, as the API server refuses such selectors anyway.
pub fn selector_matches(
    selector: &LabelSelector,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_ok = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let listed = || value.is_some_and(|v| e.values.iter().flatten().any(|x| x == v));
        match e.operator.as_str() {
            "In" => listed(),
            "NotIn" => !listed(),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && expressions_ok
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn names_prefixes_and_selectors_select() {
        let spec = TpuPolicySpec {
            namespaces: Some(vec!["team-a".into(), "research-*".into()]),
            namespace_selector: Some(LabelSelector {
                match_labels: Some(labels(&[("tier", "gold")])),
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "frozen".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                }]),
            }),
            ..Default::default()
        };
        assert!(spec.selects("team-a", &labels(&[])));
        assert!(!spec.selects("team-ab", &labels(&[])));
        assert!(spec.selects("research-x", &labels(&[])));
        assert!(spec.selects("other", &labels(&[("tier", "gold")])));
        assert!(!spec.selects("other", &labels(&[("tier", "gold"), ("frozen", "y")])));
        assert!(!spec.selects("other", &labels(&[("tier", "silver")])));
        let nothing = TpuPolicySpec::default();
        assert!(!nothing.selects("team-a", &labels(&[])));
        let everything = TpuPolicySpec {
            namespace_selector: Some(LabelSelector::default()),
            ..Default::default()
        };
        assert!(everything.selects("anything", &labels(&[])));
        let star = TpuPolicySpec {
            namespaces: Some(vec!["*".into()]),
            ..Default::default()
        };
        assert!(star.selects("anything", &labels(&[])));
    }

    #[test]
    fn in_and_not_in() {
        let sel = |op: &str| LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "team".into(),
                operator: op.into(),
                values: Some(vec!["a".into(), "b".into()]),
            }]),
        };
        assert!(selector_matches(&sel("In"), &labels(&[("team", "b")])));
        assert!(!selector_matches(&sel("In"), &labels(&[])));
        assert!(selector_matches(&sel("NotIn"), &labels(&[])));
        assert!(!selector_matches(&sel("NotIn"), &labels(&[("team", "a")])));
        assert!(!selector_matches(&sel("Bogus"), &labels(&[("team", "a")])));
    }

    #[test]
    fn account_patterns_must_name_a_domain() {
        let re = regex::Regex::new(SERVICE_ACCOUNT_PATTERN).unwrap();
        for ok in [
            "default",
            "a@p.iam.gserviceaccount.com",
            "*@p.iam.gserviceaccount.com",
            "*-compute@developer.gserviceaccount.com",
        ] {
            assert!(re.is_match(ok), "{ok}");
        }
        // A prefix pattern (`admin*`) could match any project's accounts.
        for bad in ["*", "admin*", "*@*", "a@b", "a*@p.iam.gserviceaccount.com"] {
            assert!(!re.is_match(bad), "{bad}");
        }
        let net = regex::Regex::new(NETWORK_PATTERN).unwrap();
        assert!(net.is_match("team-a-*") && !net.is_match("*-prod") && !net.is_match(""));
    }
}
