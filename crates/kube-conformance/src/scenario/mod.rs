//! The differential scenario: one fixed sequence of API requests, each with the HTTP status
//! Kubernetes' documented semantics call for. Run against kube-emulator and against a real
//! kube-apiserver, it yields two [`Transcript`]s that [`crate::compare`] lines up.
//!
//! The sequence never branches on what a server answered (only values such as uids and
//! resourceVersions are carried forward), so both transcripts have the same steps in the same order
//! and a wrong answer shows up as a difference at its step instead of derailing the rest.

mod builtin;
mod custom;
mod lifecycle;
pub mod project;
mod watch;

use kube::core::{
    Request,
    params::{DeleteParams, GetParams, PostParams},
};
use serde_json::{Value, json};

use crate::transcript::{SendError, Session, Transcript};

/// Namespace every namespaced object of the scenario lives in (deleted again at the end).
pub const NAMESPACE: &str = "kube-conformance";
/// The scenario's CustomResourceDefinition (cluster-scoped, deleted again at the end).
pub const CRD_NAME: &str = "widgets.conformance.tpu-operator.dev";
const GROUP: &str = "conformance.tpu-operator.dev";

/// Runs the whole scenario against `client` and returns what the server answered.
pub async fn run(client: kube::Client) -> Result<Transcript, SendError> {
    let input = |e: project::ProjectFileError| SendError::Scenario {
        message: e.to_string(),
    };
    let files = project::load().map_err(input)?;
    let project_crds = project::crd_names().map_err(input)?;
    let mut s = Session::new(client);
    clear_leftovers(&s, &project_crds).await?;
    setup(&mut s).await?;
    builtin::run(&mut s).await?;
    custom::run(&mut s).await?;
    lifecycle::run(&mut s).await?;
    watch::run(&mut s).await?;
    project::run(&mut s, &files).await?;
    teardown(&mut s).await?;
    project::teardown(&mut s, &project_crds).await?;
    Ok(s.into_transcript())
}

/// Request builders for the kinds the scenario uses.
pub(crate) fn namespaces() -> Request {
    Request::new("/api/v1/namespaces")
}
pub(crate) fn core(plural: &str) -> Request {
    Request::new(format!("/api/v1/namespaces/{NAMESPACE}/{plural}"))
}
pub(crate) fn grouped(group_version: &str, plural: &str) -> Request {
    Request::new(format!("/apis/{group_version}/namespaces/{NAMESPACE}/{plural}"))
}
pub(crate) fn widgets() -> Request {
    grouped(&format!("{GROUP}/v1"), "widgets")
}
fn crds() -> Request {
    Request::new("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
}

/// A plain GET of `path` (discovery documents have no resource name to append).
pub(crate) fn get_path(path: &str) -> Result<http::Request<Vec<u8>>, kube::core::request::Error> {
    http::Request::get(path)
        .body(Vec::new())
        .map_err(kube::core::request::Error::BuildRequest)
}

pub(crate) fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("a serde_json::Value always serialises")
}
pub(crate) fn meta_str<'a>(v: &'a Value, field: &str) -> &'a str {
    v["metadata"][field].as_str().unwrap_or_default()
}

/// A real cluster may still hold the previous run's namespace or CRD (a developer re-running the
/// suite against one `up.sh start`); wait until they are gone so both transcripts start clean.
async fn clear_leftovers(s: &Session, project_crds: &[String]) -> Result<(), SendError> {
    let step = "<clear leftovers>";
    let mut crd_names = vec![CRD_NAME.to_owned()];
    crd_names.extend(project_crds.iter().cloned());
    for name in &crd_names {
        s.call(step, crds().delete(name, &DeleteParams::default()))
            .await?;
    }
    s.call(step, namespaces().delete(NAMESPACE, &DeleteParams::default()))
        .await?;
    let deadline = tokio::time::Instant::now() + crate::transcript::POLL_DEADLINE;
    let leftovers = crd_names
        .iter()
        .map(|name| (crds(), name.as_str()))
        .chain([(namespaces(), NAMESPACE)]);
    for (collection, name) in leftovers {
        while s.call(step, collection.get(name, &GetParams::default())).await?.0 != 404
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }
    Ok(())
}

fn widget_crd() -> Value {
    let condition = json!({"type": "object", "required": ["type", "status"], "properties": {
        "type": {"type": "string"}, "status": {"type": "string"}, "reason": {"type": "string"}}});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                      "shortNames": ["wdg"], "categories": ["conformance"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["size"],
                            "x-kubernetes-validations": [
                                {"rule": "self.size <= self.maxSize", "message": "size must not exceed maxSize"},
                                {"rule": "!has(oldSelf.zone) || self.zone == oldSelf.zone",
                                 "message": "zone is immutable"}
                            ],
                            "properties": {
                                "size": {"type": "integer", "minimum": 0},
                                "maxSize": {"type": "integer", "default": 10},
                                "zone": {"type": "string"},
                                "mode": {"type": "string", "enum": ["Fast", "Slow"]},
                                "tags": {"type": "array", "items": {"type": "string"}},
                                "owner": {"type": "string", "nullable": true},
                                "quota": {"x-kubernetes-int-or-string": true},
                                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                            }
                        },
                        "status": {
                            "type": "object",
                            "properties": {
                                "phase": {"type": "string"},
                                "observedGeneration": {"type": "integer"},
                                "conditions": {
                                    "type": "array",
                                    "x-kubernetes-list-type": "map",
                                    "x-kubernetes-list-map-keys": ["type"],
                                    "items": condition
                                }
                            }
                        }
                    }
                }}
            }]
        }
    })
}

fn established(status: u16, crd: &Value) -> bool {
    status == 200
        && crd["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
}

async fn setup(s: &mut Session) -> Result<(), SendError> {
    s.send(
        "crd: create Widget",
        crds().create(&PostParams::default(), bytes(&widget_crd())),
        201,
    )
    .await?;
    s.poll_until(
        "crd: becomes Established",
        || crds().get(CRD_NAME, &GetParams::default()),
        200,
        established,
    )
    .await?;
    let discovery = || get_path(&format!("/apis/{GROUP}/v1"));
    let serves_widgets = |status: u16, list: &Value| {
        status == 200
            && list["resources"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["name"] == "widgets"))
    };
    s.poll_until(
        "discovery: group version lists widgets",
        discovery,
        200,
        serves_widgets,
    )
    .await?;
    s.send("discovery: group", get_path(&format!("/apis/{GROUP}")), 200)
        .await?;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    s.send(
        "namespace: create",
        namespaces().create(&PostParams::default(), bytes(&ns)),
        201,
    )
    .await?;
    Ok(())
}

async fn teardown(s: &mut Session) -> Result<(), SendError> {
    s.send(
        "namespace: delete",
        namespaces().delete(NAMESPACE, &DeleteParams::default()),
        200,
    )
    .await?;
    let gone = |status: u16, _: &Value| status == 404;
    s.poll_until(
        "namespace: contents deleted, then the namespace",
        || namespaces().get(NAMESPACE, &GetParams::default()),
        404,
        gone,
    )
    .await?;
    s.send(
        "crd: delete",
        crds().delete(CRD_NAME, &DeleteParams::default()),
        200,
    )
    .await?;
    s.poll_until(
        "crd: gone",
        || crds().get(CRD_NAME, &GetParams::default()),
        404,
        gone,
    )
    .await?;
    Ok(())
}
