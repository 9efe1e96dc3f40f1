//! Watch streams: replay from an old resourceVersion (what a restarted informer does), from the
//! middle of a history, filtered by label and by field, for a built-in kind and a custom resource.

use kube::core::{
    params::{DeleteParams, ListParams, PostParams, WatchParams},
    request::Request,
};
use serde_json::{Value, json};

use super::{bytes, core, custom::widget, widgets};
use crate::transcript::{SendError, Session};

fn labelled(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"watch": "yes"}},
           "data": {"v": value}})
}

fn params() -> WatchParams {
    WatchParams::default().disable_bookmarks().timeout(20)
}

pub(super) async fn run(s: &mut Session) -> Result<(), SendError> {
    let (start_rv, widgets_rv) = starting_versions(s).await?;
    let middle_rv = history(s).await?;
    replays(s, &start_rv, &middle_rv, &widgets_rv).await
}

fn cm() -> Request {
    core("configmaps")
}

/// The resourceVersions of the labelled ConfigMaps' and the widgets' lists before the history.
async fn starting_versions(s: &mut Session) -> Result<(String, String), SendError> {
    let start = s
        .send(
            "watch: list to get a starting resourceVersion",
            cm().list(&ListParams::default().labels("watch=yes")),
            200,
        )
        .await?;
    let start_rv = start["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    let start_widgets = s
        .send(
            "watch: list widgets for a starting resourceVersion",
            widgets().list(&ListParams::default()),
            200,
        )
        .await?;
    let widgets_rv = start_widgets["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    Ok((start_rv, widgets_rv))
}

/// The history the watches replay: a created, updated and deleted, an object outside the label
/// selector, b, and a widget. Returns the resourceVersion of a's update (the middle).
async fn history(s: &mut Session) -> Result<String, SendError> {
    let pp = PostParams::default();
    s.send(
        "watch: create a",
        cm().create(&pp, bytes(&labelled("a", "1"))),
        201,
    )
    .await?;
    let updated = s
        .send(
            "watch: update a",
            cm().patch(
                "a",
                &Default::default(),
                &kube::core::params::Patch::Merge(json!({"data": {"v": "2"}})),
            ),
            200,
        )
        .await?;
    let middle_rv = updated["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    let mut unlabelled = labelled("quiet", "1");
    unlabelled["metadata"]["labels"] = json!({"watch": "no"});
    s.send(
        "watch: create an object outside the selector",
        cm().create(&pp, bytes(&unlabelled)),
        201,
    )
    .await?;
    s.send(
        "watch: create b",
        cm().create(&pp, bytes(&labelled("b", "1"))),
        201,
    )
    .await?;
    s.send("watch: delete a", cm().delete("a", &DeleteParams::default()), 200)
        .await?;
    s.send(
        "watch: create widget",
        widgets().create(&pp, bytes(&widget("watched", json!({"size": 1})))),
        201,
    )
    .await?;
    Ok(middle_rv)
}

/// Replays of the history: from before it, from its middle, by field, and of the widget.
async fn replays(
    s: &mut Session,
    start_rv: &str,
    middle_rv: &str,
    widgets_rv: &str,
) -> Result<(), SendError> {
    let selected = params().labels("watch=yes");
    s.watch(
        "watch: replay from before the history (label selector)",
        cm().watch(&selected, start_rv),
        4,
    )
    .await?;
    s.watch(
        "watch: replay from the middle",
        cm().watch(&selected, middle_rv),
        2,
    )
    .await?;
    let by_name = params().fields("metadata.name=b");
    s.watch(
        "watch: replay filtered by field",
        cm().watch(&by_name, start_rv),
        1,
    )
    .await?;
    let watched = params().fields("metadata.name=watched");
    s.watch(
        "watch: custom resource replay",
        widgets().watch(&watched, widgets_rv),
        1,
    )
    .await?;
    Ok(())
}
