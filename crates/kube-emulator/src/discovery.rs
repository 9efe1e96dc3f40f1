//! Legacy (unaggregated) discovery: `/api`, `/apis`, `/apis/{group}`, the resource lists, and
//! `/version`. kubectl and kube-rs fall back to these when the response is not the aggregated
//! `APIGroupDiscoveryList` form.

use crate::resources::{Registry, ResourceType};
use serde_json::{Value, json};
use std::cmp::Ordering;

/// The Kubernetes version the emulator reports (kubectl warns on skew beyond one minor).
pub const KUBE_MINOR: &str = "37";

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": KUBE_MINOR,
        "emulationMajor": "1",
        "emulationMinor": KUBE_MINOR,
        "gitVersion": format!("v1.{KUBE_MINOR}.0-kube-emulator"),
        "gitCommit": "kube-emulator",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "n/a (Rust)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]
    })
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first (v1 > v1beta2 > v1alpha1).
fn version_key(v: &str) -> (u8, i64, i64) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (level, n) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    (level, major, n.parse().unwrap_or(0))
}

pub fn sort_versions(versions: &mut [String]) {
    versions.sort_by(|a, b| match version_key(b).cmp(&version_key(a)) {
        Ordering::Equal => a.cmp(b),
        other => other,
    });
}

fn group_entry(name: &str, versions: &[String]) -> Value {
    let mut versions = versions.to_vec();
    sort_versions(&mut versions);
    let gv = |v: &String| json!({"groupVersion": format!("{name}/{v}"), "version": v});
    json!({
        "name": name,
        "versions": versions.iter().map(gv).collect::<Vec<_>>(),
        "preferredVersion": gv(&versions[0]),
    })
}

pub fn group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_entry(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(registry: &Registry, name: &str) -> Option<Value> {
    let groups = registry.groups();
    let versions = groups.get(name).filter(|_| !name.is_empty())?;
    let mut g = group_entry(name, versions);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

fn resource_entry(t: &ResourceType) -> Value {
    let mut r = json!({
        "name": t.plural,
        "singularName": t.singular,
        "namespaced": t.namespaced,
        "kind": t.kind,
        "verbs": t.verbs(),
    });
    if !t.short_names.is_empty() {
        r["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        r["categories"] = json!(t.categories);
    }
    r
}

pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types = registry.in_group_version(group, version);
    if types.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for t in &types {
        resources.push(resource_entry(t));
        if t.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced,
                "kind": t.kind, "verbs": ["get", "patch", "update"]
            }));
        }
        for sub in &t.extra_subresources {
            resources.push(json!({
                "name": format!("{}/{sub}", t.plural), "singularName": "", "namespaced": t.namespaced,
                "kind": t.kind, "verbs": ["update"]
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_by_kubernetes_priority() {
        let mut v: Vec<String> = ["v1alpha1", "v2", "v1beta1", "v1", "v1beta2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        sort_versions(&mut v);
        assert_eq!(v, ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1"]);
    }

    #[test]
    fn discovery_lists_builtins() {
        let r = Registry::with_builtins();
        let core = resource_list(&r, "", "v1").unwrap();
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"namespaces")
                && names.contains(&"configmaps")
                && names.contains(&"namespaces/status")
        );
        assert!(group(&r, "coordination.k8s.io").is_some());
    }
}
