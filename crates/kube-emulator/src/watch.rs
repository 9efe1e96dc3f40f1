//! Watches: newline-delimited JSON events from a resourceVersion, with synthetic ADDED events for
//! the current state when none is given, BOOKMARKs, 410 Gone for a resourceVersion older than the
//! kept history, selector-aware ADDED/DELETED transitions, and a timeout.

use crate::cluster::{Cluster, to_served};
use crate::meta;
use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{EventType, StoredEvent};
use crate::table::{self, IncludeObject};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How objects are rendered in the events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Object,
    Table(IncludeObject),
    Metadata,
}

#[derive(Clone, Debug)]
pub struct WatchRequest {
    pub rt: Arc<ResourceType>,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub resource_version: Option<String>,
    pub allow_bookmarks: bool,
    pub send_initial_events: bool,
    pub timeout: Duration,
    pub output: Output,
}

impl WatchRequest {
    fn selects(&self, stored: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && meta::namespace(stored) != ns
        {
            return false;
        }
        // Selectors see the stored form: labels and metadata are the same in every version.
        self.labels.matches(stored) && self.fields.matches(stored)
    }

    /// The event a watcher of this request sees for a stored change, if any.
    fn translate(&self, e: &StoredEvent) -> Option<(EventType, Arc<Value>)> {
        if e.storage_key != self.rt.storage_key {
            return None;
        }
        let now = self.selects(&e.object);
        let before = e.previous.as_ref().is_some_and(|p| self.selects(p));
        match (e.event, before, now) {
            (EventType::Added, _, true) => Some((EventType::Added, e.object.clone())),
            (EventType::Deleted, true, _) => Some((EventType::Deleted, e.object.clone())),
            (EventType::Modified, true, true) => Some((EventType::Modified, e.object.clone())),
            (EventType::Modified, false, true) => Some((EventType::Added, e.object.clone())),
            (EventType::Modified, true, false) => Some((EventType::Deleted, e.object.clone())),
            _ => None,
        }
    }
}

fn gone(requested: u64, oldest: u64) -> String {
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("too old resource version: {requested} ({oldest})"),
        "reason": "Expired", "code": 410
    });
    event_line("ERROR", &status)
}

struct Renderer {
    request: WatchRequest,
    headers_sent: bool,
}

impl Renderer {
    fn event(&mut self, kind: &str, stored: &Value) -> String {
        let served = to_served(&self.request.rt, stored);
        let object = match self.request.output {
            Output::Object => served,
            Output::Metadata => table::partial_metadata(&served),
            Output::Table(include) => {
                let rv = meta::resource_version(&served).to_string();
                let t = table::table(&self.request.rt, &[served], &rv, include, !self.headers_sent);
                self.headers_sent = true;
                t
            }
        };
        event_line(kind, &object)
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> String {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let rt = &self.request.rt;
        let object = json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": metadata});
        event_line("BOOKMARK", &object)
    }
}

/// One event line, `type` before `object` as kube-apiserver writes it (`metav1.WatchEvent`
/// declares `Type` first, and Go encodes struct fields in order). A `json!` map would sort
/// `object` first, and a client that picks the object's type by the event's, as kube-rs's
/// adjacently tagged `WatchEvent` does, then buffers every object before decoding it: work a
/// real cluster never causes, which the scale benchmark would count as the operator's.
fn event_line(kind: &str, object: &Value) -> String {
    let mut line = format!("{{\"type\":{},\"object\":{object}}}", Value::from(kind));
    line.push('\n');
    line
}

/// Starts a watch; the receiver yields the response body's lines until the watch ends.
pub fn start(cluster: Arc<Cluster>, request: WatchRequest) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel::<String>(1024);
    tokio::spawn(run(cluster, request, tx));
    rx
}

async fn run(cluster: Arc<Cluster>, request: WatchRequest, tx: mpsc::Sender<String>) {
    let mut notify = cluster.subscribe();
    let mut epoch = cluster.watch_epoch();
    let deadline = tokio::time::Instant::now() + request.timeout;
    let bookmark_every = cluster.config.bookmark_interval;
    let requested: Option<u64> = request
        .resource_version
        .as_deref()
        .filter(|v| !v.is_empty() && *v != "0")
        .and_then(|v| v.parse().ok());
    let mut renderer = Renderer {
        request: request.clone(),
        headers_sent: false,
    };

    let (cursor, lines) = starting_point(&cluster, &request, &mut renderer, requested);
    for line in lines {
        if tx.send(line).await.is_err() {
            return;
        }
    }
    let Some(mut cursor) = cursor else { return };

    let mut bookmarks =
        tokio::time::interval_at(tokio::time::Instant::now() + bookmark_every, bookmark_every);
    loop {
        // Changes first: send what happened after the cursor.
        if !send_changes(&cluster, &request, &mut renderer, &tx, &mut cursor).await {
            return;
        }
        tokio::select! {
            changed = notify.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = bookmarks.tick(), if request.allow_bookmarks => {
                if tx.send(renderer.bookmark(cursor, false)).await.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(deadline) => return,
            _ = epoch.changed() => return,
            _ = tx.closed() => return,
        }
    }
}

/// Where the watch starts, and the synthetic events for the current state (with a closing
/// bookmark when the client asked for initial events and bookmarks). No start, only a 410 Gone
/// line, when the requested resourceVersion is older than the oldest watchable one.
fn starting_point(
    cluster: &Cluster,
    request: &WatchRequest,
    renderer: &mut Renderer,
    requested: Option<u64>,
) -> (Option<u64>, Vec<String>) {
    let initial = requested.is_none() || request.send_initial_events;
    let state = cluster.lock();
    let current = state.store.resource_version();
    if let Some(rv) = requested
        && rv < state.store.oldest_watchable()
        && !request.send_initial_events
    {
        return (None, vec![gone(rv, state.store.oldest_watchable())]);
    }
    if !initial {
        return (Some(requested.unwrap_or(current)), Vec::new());
    }
    let mut lines = Vec::new();
    let ns = if request.rt.namespaced {
        request.namespace.as_deref()
    } else {
        None
    };
    for obj in state.store.list(&request.rt.storage_key, ns) {
        if request.selects(&obj) {
            lines.push(renderer.event("ADDED", &obj));
        }
    }
    if request.send_initial_events && request.allow_bookmarks {
        lines.push(renderer.bookmark(current, true));
    }
    (Some(current), lines)
}

/// Sends the events after `cursor` that the watch selects, moving the cursor past each. False
/// when the watch is over: the client went away, or the events are no longer kept (410 Gone
/// sent).
async fn send_changes(
    cluster: &Cluster,
    request: &WatchRequest,
    renderer: &mut Renderer,
    tx: &mpsc::Sender<String>,
    cursor: &mut u64,
) -> bool {
    let batch = {
        let state = cluster.lock();
        match state.store.events_since(*cursor) {
            None => Err(state.store.oldest_watchable()),
            Some(events) => Ok(events),
        }
    };
    let events = match batch {
        Ok(events) => events,
        Err(oldest) => {
            let _ = tx.send(gone(*cursor, oldest)).await;
            return false;
        }
    };
    for e in events {
        *cursor = e.rv;
        if let Some((kind, obj)) = request.translate(&e) {
            let line = renderer.event(kind.as_str(), &obj);
            if tx.send(line).await.is_err() {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Config, WriteOptions};
    use crate::ssa::Scope;

    fn opts() -> WriteOptions {
        WriteOptions {
            field_manager: "t".into(),
            ..WriteOptions::default()
        }
    }

    async fn next(rx: &mut mpsc::Receiver<String>) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("event in time")
            .expect("open");
        assert!(
            line.starts_with("{\"type\":"),
            "type before object, as kube-apiserver writes: {line}"
        );
        serde_json::from_str(&line).expect("json line")
    }

    #[tokio::test]
    async fn selector_transitions_bookmarks_and_gone() {
        let cluster = Arc::new(Cluster::new(Config {
            history_limit: 3,
            bookmark_interval: Duration::from_millis(50),
            ..Config::default()
        }));
        let rt = cluster.resolve("", "v1", "configmaps").unwrap();
        let request = WatchRequest {
            rt: rt.clone(),
            namespace: Some("default".into()),
            labels: LabelSelector::parse("app=a").unwrap(),
            fields: FieldSelector::default(),
            resource_version: Some(cluster.lock().store.resource_version().to_string()),
            allow_bookmarks: true,
            send_initial_events: false,
            timeout: Duration::from_secs(30),
            output: Output::Object,
        };
        let mut rx = start(cluster.clone(), request.clone());
        let body = serde_json::json!({"metadata": {"name": "x", "labels": {"app": "b"}}});
        cluster
            .write(|s| s.create(&rt, "default", body, &opts()))
            .unwrap();
        let relabel = |app: &str| serde_json::json!({"metadata": {"labels": {"app": app}}});
        cluster
            .write(|s| {
                s.patch(
                    &rt,
                    "default",
                    "x",
                    crate::cluster::PatchType::Merge,
                    relabel("a"),
                    Scope::Whole,
                    &opts(),
                )
            })
            .unwrap();
        // Entering the selection is an ADDED, leaving it a DELETED; bookmarks may interleave.
        let mut seen = Vec::new();
        while seen.len() < 2 {
            let e = next(&mut rx).await;
            match e["type"].as_str().unwrap() {
                "BOOKMARK" => assert!(e["object"]["metadata"]["resourceVersion"].is_string()),
                t => {
                    seen.push(t.to_string());
                    if seen.len() == 1 {
                        cluster
                            .write(|s| {
                                s.patch(
                                    &rt,
                                    "default",
                                    "x",
                                    crate::cluster::PatchType::Merge,
                                    relabel("c"),
                                    Scope::Whole,
                                    &opts(),
                                )
                            })
                            .unwrap();
                    }
                }
            }
        }
        assert_eq!(seen, ["ADDED", "DELETED"]);

        // History of 3 events: resuming from the start is too old.
        let mut stale = start(
            cluster.clone(),
            WatchRequest {
                resource_version: Some("1".into()),
                ..request
            },
        );
        let e = next(&mut stale).await;
        assert_eq!(
            (e["type"].as_str(), e["object"]["code"].as_i64()),
            (Some("ERROR"), Some(410))
        );
    }
}
