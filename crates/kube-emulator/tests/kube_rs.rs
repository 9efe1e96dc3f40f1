//! kube-rs 5 against the in-process emulator: a Controller with a finalizer, SSA status and an
//! owned child; watcher resume after a restart (410 -> relist); optimistic concurrency; SSA field
//! removal and list-map merging; CEL rejections naming the field.

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::watcher;
use kube::{Client, CustomResource, Resource, ResourceExt};
use kube_emulator::KubeEmulator;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
struct WidgetSpec {
    zone: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    replicas: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    #[serde(rename = "machineType", skip_serializing_if = "Option::is_none")]
    machine_type: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
struct WidgetStatus {
    #[serde(default)]
    conditions: Vec<serde_json::Value>,
    #[serde(rename = "observedGeneration", skip_serializing_if = "Option::is_none")]
    observed_generation: Option<i64>,
}

const CRD: &str = include_str!("fixtures/widgets.yaml");
const DEADLINE: Duration = Duration::from_secs(20);

fn emulator() -> (KubeEmulator, Client) {
    let emulator = KubeEmulator::new();
    emulator.install_crds_from_yaml(CRD).expect("test CRD installs");
    let client = Client::new(emulator.router(), "default");
    (emulator, client)
}

fn widget(name: &str, zone: &str) -> Widget {
    let mut w = Widget::new(
        name,
        WidgetSpec {
            zone: zone.into(),
            replicas: None,
            note: None,
            machine_type: None,
        },
    );
    w.metadata.namespace = Some("default".into());
    w
}

/// Polls `check` until it returns Some, failing after a generous deadline.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = tokio::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[derive(Debug, thiserror::Error)]
enum ReconcileError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Finalizer(#[from] Box<kube::runtime::finalizer::Error<kube::Error>>),
}

struct Ctx {
    client: Client,
    reconciles: AtomicUsize,
    cleanups: AtomicUsize,
}

async fn reconcile(obj: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    ctx.reconciles.fetch_add(1, Ordering::SeqCst);
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<Widget> = Api::namespaced(ctx.client.clone(), &ns);
    let result = finalizer(&api, "example.dev/cleanup", obj, |event| async {
        match event {
            Finalizer::Apply(w) => {
                let name = w.name_any();
                let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
                let owner = w.controller_owner_ref(&()).expect("widget has a uid");
                let child = json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("{name}-child"), "ownerReferences": [owner]},
                    "data": {"zone": w.spec.zone}
                });
                let pp = PatchParams::apply("widget-controller").force();
                cms.patch(&format!("{name}-child"), &pp, &Patch::Apply(&child))
                    .await?;
                let status = json!({
                    "apiVersion": "example.dev/v1", "kind": "Widget",
                    "status": {
                        "observedGeneration": w.metadata.generation,
                        "conditions": [{"type": "Ready", "status": "True", "reason": "ChildReady"}]
                    }
                });
                api.patch_status(&name, &pp, &Patch::Apply(&status)).await?;
                Ok(Action::await_change())
            }
            Finalizer::Cleanup(_) => {
                ctx.cleanups.fetch_add(1, Ordering::SeqCst);
                Ok::<_, kube::Error>(Action::await_change())
            }
        }
    })
    .await;
    result.map_err(|e| ReconcileError::Finalizer(Box::new(e)))
}

fn error_policy(_obj: Arc<Widget>, _err: &ReconcileError, _ctx: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(50))
}

#[tokio::test]
async fn controller_with_finalizer_ssa_status_and_owned_child_converges_and_cleans_up() {
    let (_emulator, client) = emulator();
    let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        reconciles: AtomicUsize::new(0),
        cleanups: AtomicUsize::new(0),
    });
    let controller = Controller::new(widgets.clone(), watcher::Config::default())
        .owns(cms.clone(), watcher::Config::default())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| async {});
    let handle = tokio::spawn(controller);

    widgets
        .create(&PostParams::default(), &widget("w1", "us-central2-b"))
        .await
        .unwrap();
    let ready = eventually("Ready=True", || async {
        let w = widgets.get("w1").await.ok()?;
        let ready = w
            .status
            .as_ref()?
            .conditions
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(w)
    })
    .await;
    assert_eq!(ready.finalizers(), ["example.dev/cleanup"]);
    assert_eq!(ready.status.unwrap().observed_generation, Some(1));
    let child = eventually("child ConfigMap", || async {
        cms.get_opt("w1-child").await.ok().flatten()
    })
    .await;
    assert_eq!(child.owner_references()[0].name, "w1");

    // Converged: no reconcile storm (status and child writes are no-ops from here on).
    let settled = eventually("reconciles to settle", || async {
        let before = ctx.reconciles.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        (ctx.reconciles.load(Ordering::SeqCst) == before).then_some(before)
    })
    .await;
    assert!(
        settled <= 6,
        "expected a handful of reconciles to converge, got {settled}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        ctx.reconciles.load(Ordering::SeqCst),
        settled,
        "reconciles kept coming after convergence"
    );

    // Delete: the finalizer runs cleanup, the widget goes, and the child is garbage-collected.
    widgets.delete("w1", &DeleteParams::default()).await.unwrap();
    eventually("widget gone", || async {
        widgets.get_opt("w1").await.unwrap().is_none().then_some(())
    })
    .await;
    eventually("child collected", || async {
        cms.get_opt("w1-child").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(ctx.cleanups.load(Ordering::SeqCst), 1);
    handle.abort();
}

/// A client whose server can be swapped, to emulate an apiserver restart behind one address.
fn swappable(router: axum::Router) -> (Client, Arc<Mutex<axum::Router>>) {
    let current = Arc::new(Mutex::new(router));
    let shared = current.clone();
    let service = tower::service_fn(move |req: axum::http::Request<kube::client::Body>| {
        let router = shared.lock().unwrap().clone();
        async move { tower::ServiceExt::oneshot(router, req).await }
    });
    (Client::new(service, "default"), current)
}

#[tokio::test]
async fn watcher_relists_after_a_restart_expires_its_resource_version() {
    let first = KubeEmulator::new();
    let (client, current) = swappable(first.router());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = |name: &str| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let old_rv = cms.get("a").await.unwrap().resource_version().unwrap();

    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let inits = Arc::new(AtomicUsize::new(0));
    let (seen_w, inits_w) = (seen.clone(), inits.clone());
    let handle = tokio::spawn(
        watcher(cms.clone(), watcher::Config::default()).for_each(move |event| {
            let (seen, inits) = (seen_w.clone(), inits_w.clone());
            async move {
                match event {
                    Ok(watcher::Event::Init) => {
                        inits.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o)) => {
                        seen.lock().unwrap().push(o.name_any())
                    }
                    _ => {}
                }
            }
        }),
    );
    eventually("initial list", || async {
        seen.lock().unwrap().contains(&"a".to_string()).then_some(())
    })
    .await;

    // Restart: the new server has the state (snapshot) plus a change made while the watcher was
    // away, and no watch history.
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("state.json");
    first.save_snapshot(&snap).unwrap();
    let second = KubeEmulator::new();
    second.load_snapshot(&snap).unwrap();
    let direct: Api<ConfigMap> = Api::namespaced(Client::new(second.router(), "default"), "default");
    direct.create(&PostParams::default(), &cm("b")).await.unwrap();
    second.compact_watch_history();
    *current.lock().unwrap() = second.router();
    first.end_watches();

    // A raw watch from the old resourceVersion is answered with 410 Gone...
    let mut raw = cms.watch(&WatchParams::default(), &old_rv).await.unwrap().boxed();
    match raw.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
    // ...and the watcher recovers by relisting, which brings the change it missed.
    eventually("relist after 410", || async {
        (inits.load(Ordering::SeqCst) >= 2 && seen.lock().unwrap().contains(&"b".to_string())).then_some(())
    })
    .await;
    handle.abort();
}

#[tokio::test]
async fn stale_update_conflicts_and_noop_writes_keep_the_resource_version() {
    let (_e, client) = emulator();
    let widgets: Api<Widget> = Api::namespaced(client, "default");
    let created = widgets
        .create(&PostParams::default(), &widget("c", "us-east1-c"))
        .await
        .unwrap();
    let mut first = created.clone();
    first.spec.replicas = Some(2);
    let updated = widgets
        .replace("c", &PostParams::default(), &first)
        .await
        .unwrap();
    assert_eq!(updated.metadata.generation, Some(2));
    let mut stale = created.clone();
    stale.spec.replicas = Some(3);
    match widgets.replace("c", &PostParams::default(), &stale).await {
        Err(kube::Error::Api(e)) => assert_eq!((e.code, e.reason.as_str()), (409, "Conflict")),
        other => panic!("expected 409 Conflict, got {other:?}"),
    }
    let again = widgets
        .replace("c", &PostParams::default(), &updated)
        .await
        .unwrap();
    assert_eq!(
        again.resource_version(),
        updated.resource_version(),
        "a no-op update must not bump the resourceVersion"
    );
    // Status writes do not touch spec, so they do not bump the generation.
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    let with_status = widgets
        .patch_status("c", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(with_status.metadata.generation, Some(2));
    // Metadata-only reads (metadata_watcher, get_metadata) use PartialObjectMetadata.
    let partial = widgets.get_metadata("c").await.unwrap();
    assert_eq!(partial.metadata.generation, Some(2));
    let listed = widgets.list_metadata(&Default::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    match widgets.get_opt("missing").await {
        Ok(None) => {}
        other => panic!("expected NotFound as None, got {other:?}"),
    }
}

#[tokio::test]
async fn server_side_apply_removes_dropped_fields_and_merges_conditions_by_type() {
    let (_e, client) = emulator();
    let widgets: Api<Widget> = Api::namespaced(client, "default");
    let apply = |spec: serde_json::Value| json!({"apiVersion": "example.dev/v1", "kind": "Widget", "metadata": {"name": "s"}, "spec": spec});
    let pp = PatchParams::apply("owner");
    widgets
        .patch(
            "s",
            &pp,
            &Patch::Apply(apply(json!({"zone": "us-east1-c", "note": "hello"}))),
        )
        .await
        .unwrap();
    let w = widgets
        .patch("s", &pp, &Patch::Apply(apply(json!({"zone": "us-east1-c"}))))
        .await
        .unwrap();
    assert_eq!(
        w.spec.note, None,
        "a field the manager stopped applying must be removed"
    );

    // Another manager changing an owned field conflicts unless forced.
    let other = PatchParams::apply("other");
    match widgets
        .patch(
            "s",
            &other,
            &Patch::Apply(apply(json!({"zone": "us-east1-c", "replicas": 1, "note": "x"}))),
        )
        .await
    {
        Ok(_) => {}
        Err(e) => panic!("disjoint fields must not conflict: {e}"),
    }
    match widgets
        .patch("s", &other, &Patch::Apply(apply(json!({"zone": "us-west1-a"}))))
        .await
    {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 409);
            assert!(
                e.message.contains("conflict with \"owner\"") && e.message.contains(".spec.zone"),
                "{}",
                e.message
            );
        }
        other => panic!("expected an apply conflict, got {other:?}"),
    }

    // Applying an object read back from the server (managedFields included) is refused.
    let fetched = widgets.get("s").await.unwrap();
    match widgets.patch("s", &pp, &Patch::Apply(&fetched)).await {
        Err(kube::Error::Api(e)) => assert_eq!(
            (e.code, e.message.as_str()),
            (400, "metadata.managedFields must be nil")
        ),
        other => panic!("expected 400 for managedFields in an apply, got {other:?}"),
    }

    let status = |conditions: serde_json::Value| json!({"apiVersion": "example.dev/v1", "kind": "Widget", "metadata": {"name": "s"}, "status": {"conditions": conditions}});
    widgets
        .patch_status(
            "s",
            &PatchParams::apply("ready-writer"),
            &Patch::Apply(status(json!([{"type": "Ready", "status": "False"}]))),
        )
        .await
        .unwrap();
    widgets
        .patch_status(
            "s",
            &PatchParams::apply("synced-writer"),
            &Patch::Apply(status(json!([{"type": "Synced", "status": "True"}]))),
        )
        .await
        .unwrap();
    let w = widgets
        .patch_status(
            "s",
            &PatchParams::apply("ready-writer"),
            &Patch::Apply(status(json!([{"type": "Ready", "status": "True"}]))),
        )
        .await
        .unwrap();
    let conditions = w.status.unwrap().conditions;
    assert_eq!(conditions.len(), 2, "{conditions:?}");
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    );
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "Synced" && c["status"] == "True")
    );
}

#[tokio::test]
async fn cel_and_schema_rejections_name_the_field() {
    let (_e, client) = emulator();
    let widgets: Api<Widget> = Api::namespaced(client, "default");
    let invalid = |r: Result<Widget, kube::Error>| match r {
        Err(kube::Error::Api(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
            e.message
        }
        other => panic!("expected 422 Invalid, got {other:?}"),
    };
    let msg = invalid(
        widgets
            .create(&PostParams::default(), &widget("bad", "nowhere"))
            .await,
    );
    assert!(
        msg.contains("spec.zone: Invalid value: \"nowhere\": spec.zone in body should match"),
        "{msg}"
    );

    let mut tpu = widget("m", "us-east1-c");
    tpu.spec.machine_type = Some("n1-standard-4".into());
    let msg = invalid(widgets.create(&PostParams::default(), &tpu).await);
    assert!(
        msg.contains("spec.machineType: Invalid value: machine type n1-standard-4 is not a TPU machine type"),
        "{msg}"
    );

    let created = widgets
        .create(&PostParams::default(), &widget("imm", "us-east1-c"))
        .await
        .unwrap();
    let mut moved = created.clone();
    moved.spec.zone = "us-west1-a".into();
    let msg = invalid(widgets.replace("imm", &PostParams::default(), &moved).await);
    assert!(
        msg.contains("spec.zone: Invalid value: zone is immutable"),
        "{msg}"
    );
}

#[tokio::test]
async fn recorder_events_are_visible_in_both_event_apis() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let (_e, client) = emulator();
    let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
    let w = widgets
        .create(&PostParams::default(), &widget("ev", "us-east1-c"))
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "widget-controller".into(),
            instance: None,
        },
    );
    let event = Event {
        type_: EventType::Normal,
        reason: "Provisioned".into(),
        note: Some("child created".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&event, &w.object_ref(&())).await.unwrap();
    recorder.publish(&event, &w.object_ref(&())).await.unwrap();
    let core: Api<CoreEvent> = Api::namespaced(client, "default");
    let listed = core.list(&Default::default()).await.unwrap();
    assert_eq!(
        listed.items.len(),
        1,
        "the repeat is a series update of the same Event"
    );
    let e = &listed.items[0];
    assert_eq!(e.message.as_deref(), Some("child created"));
    assert_eq!(e.involved_object.name.as_deref(), Some("ev"));
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(2));
}

#[tokio::test]
async fn served_on_a_socket_with_a_kubeconfig_and_stops_on_shutdown() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let emulator = KubeEmulator::new();
    let server = emulator.start("127.0.0.1:0").await.unwrap();
    let kubeconfig: kube::config::Kubeconfig =
        serde_yaml::from_str(&kube_emulator::kubeconfig(&server.url)).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    let names: Vec<String> = namespaces
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    let addr = server.addr;
    server.shutdown();
    eventually("listener closed", || async {
        tokio::net::TcpStream::connect(addr).await.is_err().then_some(())
    })
    .await;
}
