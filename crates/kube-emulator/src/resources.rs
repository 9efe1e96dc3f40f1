//! The resource types the server knows: the built-in kinds the operator touches and every served
//! version of every registered CustomResourceDefinition.

use crate::validation::CrdValidator;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One `additionalPrinterColumns` entry (or a built-in kind's fixed column).
#[derive(Clone, Debug)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// How a built-in kind computes its table cells (CRDs use their printer columns instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuiltinTable {
    Namespace,
    ConfigMap,
    Secret,
    Event,
    Lease,
    Crd,
    None,
}

/// A served group/version/resource.
#[derive(Debug)]
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub namespaced: bool,
    /// Whether `status` is a subresource: main writes then ignore status and vice versa.
    pub status_subresource: bool,
    /// Whether the server maintains `metadata.generation` (CRs, CRDs).
    pub has_generation: bool,
    /// Backed by a CRD.
    pub custom: bool,
    /// Objects of all versions of a resource share one store: `group/plural`.
    pub storage_key: String,
    /// The apiVersion objects are stored in (a CRD's storage version).
    pub storage_api_version: String,
    pub validator: Option<Arc<CrdValidator>>,
    /// The structural schema (OpenAPI, `kubectl explain`).
    pub schema: Option<Value>,
    /// The schema server-side apply and strategic merge follow for list and map types
    /// (`schema` with a `metadata` that knows finalizers are a set and ownerReferences a map).
    pub merge_schema: Value,
    pub printer_columns: Vec<PrinterColumn>,
    pub builtin_table: BuiltinTable,
    /// Names of the extra subresources served besides `status` (e.g. namespaces/finalize).
    pub extra_subresources: Vec<&'static str>,
    /// A deprecated CRD version's warning, sent with every response as the API server does
    /// (`Warning: 299 - "..."`, which kubectl prints as `Warning: ...`).
    pub deprecation_warning: Option<String>,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn verbs(&self) -> Vec<&'static str> {
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }

    /// Default deletion propagation when the request names none (the apiserver's per-kind default).
    pub fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.plural == "namespaces"
    }

    pub fn is_crd(&self) -> bool {
        self.group == "apiextensions.k8s.io" && self.plural == "customresourcedefinitions"
    }

    pub fn is_secret(&self) -> bool {
        self.group.is_empty() && self.plural == "secrets"
    }
}

fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    short_names: &[&str],
    namespaced: bool,
    table: BuiltinTable,
) -> ResourceType {
    ResourceType {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        short_names: short_names.iter().map(|s| s.to_string()).collect(),
        categories: Vec::new(),
        namespaced,
        status_subresource: false,
        has_generation: false,
        custom: false,
        storage_key: format!("{group}/{plural}"),
        storage_api_version: if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        },
        validator: None,
        schema: None,
        merge_schema: merge_schema(None),
        printer_columns: Vec::new(),
        builtin_table: table,
        extra_subresources: Vec::new(),
        deprecation_warning: None,
    }
}

/// The built-in kinds. Core and events.k8s.io Events share one store (as in a real cluster, the
/// two are views of the same objects).
pub fn builtins() -> Vec<ResourceType> {
    vec![
        namespace_type(),
        builtin(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            &["cm"],
            true,
            BuiltinTable::ConfigMap,
        ),
        builtin("", "v1", "Secret", "secrets", &[], true, BuiltinTable::Secret),
        builtin("", "v1", "Event", "events", &["ev"], true, BuiltinTable::Event),
        events_v1_type(),
        builtin(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            &[],
            true,
            BuiltinTable::Lease,
        ),
        crd_type(),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
            &[],
            false,
            BuiltinTable::None,
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
            &[],
            false,
            BuiltinTable::None,
        ),
    ]
}

/// Namespaces, with a status subresource and `finalize`.
fn namespace_type() -> ResourceType {
    let mut namespace = builtin(
        "",
        "v1",
        "Namespace",
        "namespaces",
        &["ns"],
        false,
        BuiltinTable::Namespace,
    );
    namespace.status_subresource = true;
    namespace.extra_subresources = vec!["finalize"];
    namespace
}

/// CustomResourceDefinitions, with a status subresource and a generation, in the
/// `api-extensions` category.
fn crd_type() -> ResourceType {
    let mut crd = builtin(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        &["crd", "crds"],
        false,
        BuiltinTable::Crd,
    );
    crd.status_subresource = true;
    crd.has_generation = true;
    crd.categories = vec!["api-extensions".into()];
    crd
}

/// events.k8s.io Events: a view of the core Events' store.
fn events_v1_type() -> ResourceType {
    let mut events_v1 = builtin(
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        &["ev"],
        true,
        BuiltinTable::Event,
    );
    events_v1.storage_key = "/events".into();
    events_v1.storage_api_version = "v1".into();
    events_v1
}

/// All served resource types, keyed by (group, version, plural).
#[derive(Debug, Default)]
pub struct Registry {
    types: BTreeMap<(String, String, String), Arc<ResourceType>>,
}

impl Registry {
    pub fn with_builtins() -> Self {
        let mut r = Self::default();
        for t in builtins() {
            r.insert(t);
        }
        r
    }

    pub fn insert(&mut self, t: ResourceType) {
        self.types.insert(
            (t.group.clone(), t.version.clone(), t.plural.clone()),
            Arc::new(t),
        );
    }

    /// Removes every version of `group/plural` (a CRD was deleted or replaced).
    pub fn remove_resource(&mut self, group: &str, plural: &str) {
        self.types.retain(|(g, _, p), _| !(g == group && p == plural));
    }

    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.types.values()
    }

    /// Groups with their versions, in registration-independent (sorted) order; core ("") first.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (g, v, _) in self.types.keys() {
            let versions = groups.entry(g.clone()).or_default();
            if !versions.contains(v) {
                versions.push(v.clone());
            }
        }
        groups
    }

    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<Arc<ResourceType>> {
        self.types
            .iter()
            .filter(|((g, v, _), _)| g == group && v == version)
            .map(|(_, t)| t.clone())
            .collect()
    }
}

/// A pseudo-schema for `metadata`, telling server-side apply how its lists merge.
pub fn metadata_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            "ownerReferences": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["uid"],
                "items": {"type": "object"}
            }
        }
    })
}

/// `schema` (or an empty object schema) with its `metadata` replaced by [`metadata_schema`].
pub fn merge_schema(schema: Option<&Value>) -> Value {
    let mut s = schema.cloned().unwrap_or_else(|| json!({"type": "object"}));
    if !s.get("properties").is_some_and(Value::is_object) {
        s["properties"] = json!({});
    }
    s["properties"]["metadata"] = metadata_schema();
    s
}
