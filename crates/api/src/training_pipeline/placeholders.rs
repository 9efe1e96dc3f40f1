//! Per-run paths: `$(PIPELINE_NAME)`, `$(PIPELINE_NAMESPACE)` and `$(PIPELINE_UID)` in
//! `spec.artifacts` (issue 35 item 5).
//!
//! A sweep of variants created with `metadata.generateName` cannot spell its own name in the
//! manifest: the API server picks it. So the artifact URIs name it by placeholder, and the
//! controller expands them once, before anything reads the artifacts (children's specs, the Vertex
//! job's `baseOutputDirectory`, checkpoints, markers, the model check, status outputs, the
//! tenancy storage checks). Admission refuses any other `$(…)` in these URIs (see
//! [`crate::cel`]), so a typo is an error at `kubectl apply`, not a directory named `$(PIPELNE_NAME)`.
//!
//! Unlike the `$(VAR)` expansion of args and env (Kubernetes' rules, with `$$` as an escape),
//! every `$(` in an artifact URI starts a placeholder: a `gs://` path has no use for the literal
//! text. Pure; no Kubernetes or Google Cloud.

use super::Artifacts;

/// The placeholder names, as written between `$(` and `)`.
pub const PLACEHOLDERS: [&str; 3] = ["PIPELINE_NAME", "PIPELINE_NAMESPACE", "PIPELINE_UID"];

/// The artifact fields that take placeholders, as the spec names them.
pub const FIELDS: [&str; 4] = ["rawData", "processedData", "modelDir", "checkpointDir"];

/// What the placeholders stand for: the pipeline's identity once the API server assigned it.
#[derive(Clone, Copy, Debug)]
pub struct Identity<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub uid: &'a str,
}

impl Identity<'_> {
    fn value(&self, placeholder: &str) -> Option<&str> {
        match placeholder {
            "PIPELINE_NAME" => Some(self.name),
            "PIPELINE_NAMESPACE" => Some(self.namespace),
            "PIPELINE_UID" => Some(self.uid),
            _ => None,
        }
    }
}

/// `uri` with every known placeholder replaced; anything else stays as written (admission
/// refuses unknown ones, so only an object admitted before this rule can still hold one).
pub fn expand(uri: &str, id: Identity<'_>) -> String {
    let mut out = String::with_capacity(uri.len());
    let mut rest = uri;
    while let Some(at) = rest.find("$(") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        match after
            .find(')')
            .and_then(|end| Some((end, id.value(&after[..end])?)))
        {
            Some((end, value)) => {
                out.push_str(value);
                rest = &after[end + 1..];
            }
            None => {
                out.push_str("$(");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `artifacts` with every URI expanded for `id`.
pub fn expand_artifacts(artifacts: &Artifacts, id: Identity<'_>) -> Artifacts {
    let opt = |uri: &Option<String>| uri.as_deref().map(|u| expand(u, id));
    Artifacts {
        raw_data: opt(&artifacts.raw_data),
        processed_data: opt(&artifacts.processed_data),
        model_dir: expand(&artifacts.model_dir, id),
        checkpoint_dir: opt(&artifacts.checkpoint_dir),
        checkpoints_on_retry: artifacts.checkpoints_on_retry,
    }
}

/// The RE2 pattern a URI with only known placeholders matches: every `$(` (after any run of
/// `$`) opens one of [`PLACEHOLDERS`] and is closed.
pub fn known_only_pattern() -> String {
    format!(r"^([^$]|[$]+[^$(]|[$]+[(]({})[)])*[$]*$", PLACEHOLDERS.join("|"))
}

/// The admission message for `field` (e.g. `modelDir`) holding an unknown placeholder.
pub fn unknown_message(field: &str) -> String {
    let known: Vec<String> = PLACEHOLDERS.iter().map(|p| format!("$({p})")).collect();
    format!(
        "spec.artifacts.{field}: unknown placeholder: artifact URIs take only {} (a $( always starts one)",
        known.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: Identity<'static> = Identity {
        name: "sweep-x7k2p",
        namespace: "team-a",
        uid: "0b9d-11",
    };

    #[test]
    fn known_placeholders_are_replaced_everywhere_they_appear() {
        assert_eq!(
            expand(
                "gs://b/$(PIPELINE_NAMESPACE)/$(PIPELINE_NAME)/$(PIPELINE_UID)/$(PIPELINE_NAME)",
                ID
            ),
            "gs://b/team-a/sweep-x7k2p/0b9d-11/sweep-x7k2p"
        );
        assert_eq!(expand("gs://b/models/run-1/", ID), "gs://b/models/run-1/");
    }

    #[test]
    fn unknown_or_unterminated_placeholders_stay_as_written() {
        assert_eq!(
            expand("gs://b/$(MODEL)/$(PIPELINE_NAME)", ID),
            "gs://b/$(MODEL)/sweep-x7k2p"
        );
        assert_eq!(expand("gs://b/$(PIPELINE_NAME", ID), "gs://b/$(PIPELINE_NAME");
        assert_eq!(expand("gs://b/$x$", ID), "gs://b/$x$");
    }

    #[test]
    fn every_artifact_uri_is_expanded_and_unset_ones_stay_unset() {
        let a = Artifacts {
            raw_data: Some("gs://b/raw/".into()),
            processed_data: Some("gs://b/p/$(PIPELINE_NAME)/".into()),
            model_dir: "gs://b/m/$(PIPELINE_NAME)/".into(),
            checkpoint_dir: None,
            ..Artifacts::default()
        };
        let e = expand_artifacts(&a, ID);
        assert_eq!(e.raw_data.as_deref(), Some("gs://b/raw/"));
        assert_eq!(e.processed_data.as_deref(), Some("gs://b/p/sweep-x7k2p/"));
        assert_eq!(e.model_dir, "gs://b/m/sweep-x7k2p/");
        assert_eq!(e.checkpoint_dir, None);
    }

    #[test]
    fn the_admission_pattern_accepts_exactly_the_known_placeholders() {
        let re = regex::Regex::new(&known_only_pattern()).unwrap();
        for ok in [
            "gs://b/m/",
            "gs://b/m/$(PIPELINE_NAME)/",
            "gs://b/$(PIPELINE_NAMESPACE)/$(PIPELINE_UID)",
            "gs://b/$x/$",
            "gs://b/$$(PIPELINE_UID)",
        ] {
            assert!(re.is_match(ok), "{ok} should be admitted");
        }
        for bad in [
            "gs://b/$(MODEL_DIR)/",
            "gs://b/$(PIPELINE_NAME",
            "gs://b/$$(NAME)",
            "gs://b/$()",
        ] {
            assert!(!re.is_match(bad), "{bad} should be refused");
        }
    }
}
