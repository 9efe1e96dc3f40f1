//! `KIND/NAME` on the command line (`logs`, `describe`), read with the caller's kubeconfig; a
//! failed read is kubectl's one line (`Error from server (NotFound): ...`), not a debug dump.

use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// The kinds the CLI shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    TrainingPipeline,
    TpuSlice,
    PreprocessBatch,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::TrainingPipeline => "TrainingPipeline",
            Kind::TpuSlice => "TpuSlice",
            Kind::PreprocessBatch => "PreprocessBatch",
        }
    }
}

/// `KIND/NAME` as given.
#[derive(Clone, Debug)]
pub struct Object {
    pub kind: Kind,
    pub name: String,
}

impl Object {
    /// `KIND/NAME`, KIND as kubectl takes it: the kind, its plural or a short name, any case,
    /// optionally with the API group. `verb` is what the command does, for the error.
    pub fn parse(text: &str, verb: &str) -> anyhow::Result<Self> {
        let Some((kind, name)) = text.split_once('/') else {
            anyhow::bail!("{text:?}: expected KIND/NAME, e.g. tpl/quickstart or tpuslice/my-slice");
        };
        let kind = kind.to_ascii_lowercase();
        let kind = kind.strip_suffix(".tpu-operator.dev").unwrap_or(&kind);
        let kind = match kind {
            "trainingpipeline" | "trainingpipelines" | "tpl" | "pipeline" => Kind::TrainingPipeline,
            "tpuslice" | "tpuslices" | "tpus" | "slice" => Kind::TpuSlice,
            "preprocessbatch" | "preprocessbatches" | "ppb" => Kind::PreprocessBatch,
            other => anyhow::bail!(
                "{other:?} has no {verb} here: use trainingpipeline (tpl), tpuslice (tpus) or preprocessbatch (ppb)"
            ),
        };
        if name.is_empty() || name.contains('/') {
            anyhow::bail!("{text:?}: expected KIND/NAME with one name");
        }
        Ok(Self {
            kind,
            name: name.to_string(),
        })
    }

    pub fn display(&self, namespace: &str) -> String {
        format!("{} {namespace}/{}", self.kind.name(), self.name)
    }

    /// The object, or the API server's refusal as kubectl prints it.
    pub async fn get<K>(&self, client: &kube::Client, namespace: &str) -> anyhow::Result<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope> + Clone + DeserializeOwned + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Api::<K>::namespaced(client.clone(), namespace)
            .get(&self.name)
            .await
            .map_err(|e| from_server(e, &self.display(namespace), namespace))
    }
}

/// The API server refused a read: kubectl's `Error from server (Reason): message` line.
#[derive(Debug)]
pub struct FromServer {
    pub code: u16,
    line: String,
}

impl std::fmt::Display for FromServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line)
    }
}

impl std::error::Error for FromServer {}

/// A failed read of `what` in `namespace` as one line: the server's answer as kubectl shows it
/// (a NotFound says which namespace was looked in), or why the server was not reached.
pub fn from_server(e: kube::Error, what: &str, namespace: &str) -> anyhow::Error {
    match e {
        kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() { "Unknown" } else { &s.reason };
            let mut line = format!("Error from server ({reason}): {}", s.message);
            if s.code == 404 {
                line.push_str(&format!(" in namespace {namespace:?} (another: -n NAMESPACE)"));
            }
            anyhow::Error::new(FromServer { code: s.code, line })
        }
        other => anyhow::anyhow!("reading {what}: {other}"),
    }
}

/// The object is not there (any more).
pub fn is_gone(e: &anyhow::Error) -> bool {
    e.downcast_ref::<FromServer>().is_some_and(|e| e.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_as_kubectl_takes_them() {
        for text in [
            "tpl/q",
            "TrainingPipeline/q",
            "trainingpipelines.tpu-operator.dev/q",
            "pipeline/q",
        ] {
            assert_eq!(
                Object::parse(text, "logs").unwrap().kind,
                Kind::TrainingPipeline,
                "{text}"
            );
        }
        assert_eq!(Object::parse("tpus/s", "logs").unwrap().kind, Kind::TpuSlice);
        assert_eq!(
            Object::parse("ppb/b", "logs").unwrap().kind,
            Kind::PreprocessBatch
        );
        let err = Object::parse("pod/x", "logs").unwrap_err().to_string();
        assert!(err.contains("trainingpipeline (tpl)"), "{err}");
        assert!(Object::parse("tpl", "logs").is_err());
        assert!(Object::parse("tpl/a/b", "logs").is_err());
    }

    #[test]
    fn a_refused_read_is_kubectls_one_line() {
        let status =
            kube::core::Status::failure("trainingpipelines.tpu-operator.dev \"x\" not found", "NotFound")
                .with_code(404);
        let err = from_server(
            kube::Error::Api(Box::new(status)),
            "TrainingPipeline default/x",
            "default",
        );
        assert_eq!(
            format!("{err:#}"),
            "Error from server (NotFound): trainingpipelines.tpu-operator.dev \"x\" not found in namespace \"default\" (another: -n NAMESPACE)"
        );
        assert!(is_gone(&err));
    }
}
