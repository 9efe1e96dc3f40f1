//! `tpu-operator convert-tenancy`: the `tenancy:` section of an old config file as `TpuPolicy`
//! manifests, so moving to policy objects is one `kubectl apply`.
//!
//! The old section chose one policy per namespace (exact key, else longest `prefix*` key, else
//! `default`); `TpuPolicy` objects all apply where they select. Exact and prefix keys convert one
//! to one (a namespace matched by both an exact and a prefix key is now governed by both: the
//! output says where that happens). `default` has no one-to-one form: a default that allows
//! nothing becomes `namespacesWithoutPolicy: Deny`; any other is printed as a policy selecting
//! no namespace yet, to be given a selector by hand.

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::{Context as _, bail};
use tpu_operator_api::tpu_policy::{TpuPolicy, TpuPolicySpec};

/// Flags of `tpu-operator convert-tenancy`.
#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// The old operator config file with a `tenancy:` section.
    #[arg(long)]
    pub config: PathBuf,
}

#[derive(serde::Deserialize)]
struct OldFile {
    #[serde(default)]
    tenancy: Option<OldTenancy>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct OldTenancy {
    #[serde(default)]
    namespaces: BTreeMap<String, TpuPolicySpec>,
    #[serde(default)]
    default: Option<TpuPolicySpec>,
}

pub fn run(args: &ConvertArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("reading {}", args.config.display()))?;
    print!("{}", convert(&text)?);
    Ok(())
}

/// The manifests (a YAML stream with explanatory comments) for an old config file.
pub fn convert(config: &str) -> anyhow::Result<String> {
    let file: OldFile = serde_yaml::from_str(config).context("parsing the config file")?;
    let Some(old) = file.tenancy else {
        bail!("the config file has no `tenancy:` section: nothing to convert");
    };
    let mut out = String::from(
        "# TpuPolicy objects converted from the config file's `tenancy:` section.\n\
         # Apply with `kubectl apply --server-side -f`, then remove `tenancy:` from the config.\n",
    );
    let prefixes: Vec<&str> = old
        .namespaces
        .keys()
        .filter_map(|k| k.strip_suffix('*'))
        .collect();
    for (key, rules) in &old.namespaces {
        let mut spec = rules.clone();
        spec.namespaces = Some(vec![key.clone()]);
        spec.namespace_selector = None;
        if !key.ends_with('*') && prefixes.iter().any(|p| key.starts_with(p)) {
            out.push_str(&format!(
                "# NOTE: {key:?} also matches a prefix key; both policies now apply to it (the most restrictive wins).\n"
            ));
        }
        out.push_str(&manifest(&policy_name(key), spec)?);
    }
    if let Some(default) = old.default {
        if default.allowed_projects.as_ref().is_some_and(Vec::is_empty) {
            out.push_str(
                "# tenancy.default allowed nothing: set `namespacesWithoutPolicy: Deny` in the config \
                 (Helm: config.namespacesWithoutPolicy).\n",
            );
        } else {
            out.push_str(
                "# tenancy.default governed every namespace no key matched; policies combine instead.\n\
                 # Give this one a spec.namespaceSelector for those namespaces (it selects none as printed),\n\
                 # or set namespacesWithoutPolicy: Deny and give every namespace a policy.\n",
            );
            let mut spec = default;
            spec.namespaces = Some(vec![]);
            out.push_str(&manifest("default-namespaces", spec)?);
        }
    }
    Ok(out)
}

/// `team-a` → `team-a`, `research-*` → `research-prefix`, `*` → `all-namespaces`.
fn policy_name(key: &str) -> String {
    match key.strip_suffix('*') {
        Some("") => "all-namespaces".into(),
        Some(prefix) => format!("{}-prefix", prefix.trim_end_matches('-')),
        None => key.to_owned(),
    }
}

fn manifest(name: &str, spec: TpuPolicySpec) -> anyhow::Result<String> {
    Ok(format!(
        "---\n{}",
        serde_yaml::to_string(&TpuPolicy::new(name, spec))?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_policies_and_a_closed_default_becomes_deny() {
        let out = convert(
            "project: p\ntenancy:\n  namespaces:\n    team-a: {allowedZones: [us-east5-b], maxChips: 8}\n    team-*: {allowedCapacity: [spot]}\n  default: {allowedProjects: []}\n",
        )
        .unwrap();
        let docs: Vec<TpuPolicy> = out
            .split("---\n")
            .filter(|d| d.contains("kind: TpuPolicy"))
            .map(|d| serde_yaml::from_str(d).unwrap())
            .collect();
        let names: Vec<_> = docs.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["team-prefix", "team-a"]);
        assert_eq!(
            docs[1].spec.namespaces.as_deref(),
            Some(&["team-a".to_string()][..])
        );
        assert_eq!(docs[1].spec.max_chips, Some(8));
        assert!(out.contains("namespacesWithoutPolicy: Deny"), "{out}");
        assert!(out.contains("both policies now apply"), "{out}");
        assert!(convert("project: p\n").is_err());
    }
}
