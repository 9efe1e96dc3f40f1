//! Semantics tests on the engine directly (no HTTP): deletion and garbage collection, namespaces,
//! preconditions, paging, generateName, Events in both API groups.

use super::*;
use crate::meta;
use crate::selectors::LabelSelector;
use serde_json::json;

fn cluster() -> Cluster {
    Cluster::new(Config::default())
}

fn rt(c: &Cluster, group: &str, version: &str, plural: &str) -> Arc<ResourceType> {
    c.resolve(group, version, plural).expect("served")
}

fn opts() -> WriteOptions {
    WriteOptions {
        field_manager: "test".into(),
        ..WriteOptions::default()
    }
}

fn cm(name: &str, owners: &[(&str, bool)]) -> Value {
    let refs: Vec<Value> = owners
        .iter()
        .map(|(uid, block)| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid, "blockOwnerDeletion": block}))
        .collect();
    let mut v =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}});
    if !refs.is_empty() {
        v["metadata"]["ownerReferences"] = json!(refs);
    }
    v
}

fn create(c: &Cluster, body: Value) -> Value {
    let t = rt(c, "", "v1", "configmaps");
    c.write(|s| s.create(&t, "default", body, &opts()))
        .expect("create")
        .object
}

fn exists(c: &Cluster, name: &str) -> Option<Value> {
    let t = rt(c, "", "v1", "configmaps");
    c.lock().get(&t, "default", name).ok()
}

fn delete(c: &Cluster, name: &str, propagation: Option<Propagation>) -> DeleteOutcome {
    let t = rt(c, "", "v1", "configmaps");
    c.write(|s| {
        s.delete(
            &t,
            "default",
            name,
            &DeleteOptions {
                propagation,
                ..DeleteOptions::default()
            },
        )
    })
    .expect("delete")
}

#[test]
fn background_deletion_collects_dependents_and_keeps_shared_ones() {
    let c = cluster();
    let a = create(&c, cm("a", &[]));
    let b = create(&c, cm("b", &[]));
    let (ua, ub) = (meta::uid(&a).to_string(), meta::uid(&b).to_string());
    create(&c, cm("only-a", &[(&ua, true)]));
    create(&c, cm("both", &[(&ua, false), (&ub, false)]));
    assert!(matches!(delete(&c, "a", None), DeleteOutcome::Deleted(_)));
    assert!(
        exists(&c, "only-a").is_none(),
        "dependent of a deleted owner is collected"
    );
    let both = exists(&c, "both").expect("a dependent with a remaining owner stays");
    assert_eq!(meta::owner_uids(&both), vec![(ub, false)]);
}

#[test]
fn foreground_deletion_waits_for_blocking_dependents_with_finalizers() {
    let c = cluster();
    let owner = create(&c, cm("owner", &[]));
    let uid = meta::uid(&owner).to_string();
    let mut child = cm("child", &[(&uid, true)]);
    child["metadata"]["finalizers"] = json!(["test/hold"]);
    create(&c, child);
    let DeleteOutcome::Pending(pending) = delete(&c, "owner", Some(Propagation::Foreground)) else {
        panic!("owner must wait")
    };
    assert_eq!(meta::finalizers(&pending), ["foregroundDeletion"]);
    let child = exists(&c, "child").expect("child waits on its finalizer");
    assert!(meta::is_deleting(&child));
    assert!(exists(&c, "owner").is_some());
    // Releasing the child's finalizer lets both go.
    let t = rt(&c, "", "v1", "configmaps");
    c.write(|s| {
        s.patch(
            &t,
            "default",
            "child",
            PatchType::Merge,
            json!({"metadata": {"finalizers": null}}),
            Scope::Whole,
            &opts(),
        )
    })
    .unwrap();
    assert!(exists(&c, "child").is_none());
    assert!(
        exists(&c, "owner").is_none(),
        "owner goes once no blocking dependent is left"
    );
}

#[test]
fn orphan_deletion_keeps_dependents_without_the_reference() {
    let c = cluster();
    let owner = create(&c, cm("owner", &[]));
    create(&c, cm("child", &[(meta::uid(&owner), true)]));
    delete(&c, "owner", Some(Propagation::Orphan));
    let child = exists(&c, "child").expect("orphaned child stays");
    assert!(meta::owner_uids(&child).is_empty());
}

#[test]
fn dependents_of_missing_owners_are_collected_on_create() {
    let c = cluster();
    create(&c, cm("stray", &[("no-such-uid", true)]));
    assert!(exists(&c, "stray").is_none());
}

#[test]
fn finalizers_block_deletion_and_cannot_be_added_while_deleting() {
    let c = cluster();
    let mut body = cm("f", &[]);
    body["metadata"]["finalizers"] = json!(["a/b"]);
    create(&c, body);
    let DeleteOutcome::Pending(p) = delete(&c, "f", None) else {
        panic!("finalizer must hold the object")
    };
    assert!(meta::is_deleting(&p));
    let t = rt(&c, "", "v1", "configmaps");
    let err = c
        .write(|s| {
            s.patch(
                &t,
                "default",
                "f",
                PatchType::Merge,
                json!({"metadata": {"finalizers": ["a/b", "c/d"]}}),
                Scope::Whole,
                &opts(),
            )
        })
        .unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        err.message.contains("no new finalizers can be added"),
        "{}",
        err.message
    );
    let before = c.lock().store.resource_version();
    c.write(|s| {
        s.patch(
            &t,
            "default",
            "f",
            PatchType::Json,
            json!([{"op": "remove", "path": "/metadata/finalizers"}]),
            Scope::Whole,
            &opts(),
        )
    })
    .unwrap();
    assert!(exists(&c, "f").is_none());
    let events = c.lock().store.events_since(before).unwrap();
    assert_eq!(events.len(), 1, "removing the last finalizer emits only DELETED");
    assert_eq!(events[0].event, crate::store::EventType::Deleted);
}

#[test]
fn namespace_deletion_removes_its_contents_then_itself() {
    let c = cluster();
    let ns_rt = rt(&c, "", "v1", "namespaces");
    let t = rt(&c, "", "v1", "configmaps");
    c.write(|s| s.create(&ns_rt, "", json!({"metadata": {"name": "team"}}), &opts()))
        .unwrap();
    let mut held = cm("held", &[]);
    held["metadata"]["finalizers"] = json!(["x/y"]);
    c.write(|s| s.create(&t, "team", cm("plain", &[]), &opts()))
        .unwrap();
    c.write(|s| s.create(&t, "team", held, &opts())).unwrap();
    c.write(|s| s.delete(&ns_rt, "", "team", &DeleteOptions::default()))
        .unwrap();
    let ns = c
        .lock()
        .get(&ns_rt, "", "team")
        .expect("held content keeps the namespace");
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert!(c.lock().get(&t, "team", "plain").is_err());
    let err = c
        .write(|s| s.create(&t, "team", cm("late", &[]), &opts()))
        .unwrap_err();
    assert_eq!(err.code, 403);
    c.write(|s| {
        s.patch(
            &t,
            "team",
            "held",
            PatchType::Merge,
            json!({"metadata": {"finalizers": null}}),
            Scope::Whole,
            &opts(),
        )
    })
    .unwrap();
    assert!(
        c.lock().get(&ns_rt, "", "team").is_err(),
        "empty terminating namespace goes away"
    );
}

#[test]
fn delete_preconditions_and_deletecollection() {
    let c = cluster();
    let a = create(&c, cm("a", &[]));
    let t = rt(&c, "", "v1", "configmaps");
    let stale = DeleteOptions {
        precondition_uid: Some("other".into()),
        ..DeleteOptions::default()
    };
    let err = c.write(|s| s.delete(&t, "default", "a", &stale)).unwrap_err();
    assert_eq!((err.code, err.reason), (409, "Conflict"));
    let rv = DeleteOptions {
        precondition_rv: Some(meta::resource_version(&a).into()),
        ..DeleteOptions::default()
    };
    c.write(|s| s.delete(&t, "default", "a", &rv)).unwrap();
    for (name, tier) in [("x", "web"), ("y", "web"), ("z", "db")] {
        let mut body = cm(name, &[]);
        body["metadata"]["labels"] = json!({"tier": tier});
        create(&c, body);
    }
    let list = ListOptions {
        labels: LabelSelector::parse("tier=web").unwrap(),
        ..ListOptions::default()
    };
    let deleted = c
        .write(|s| s.delete_collection(&t, Some("default"), &list, &DeleteOptions::default()))
        .unwrap();
    assert_eq!(deleted.len(), 2);
    assert!(exists(&c, "z").is_some());
}

#[test]
fn paging_generate_name_and_event_versions() {
    let c = cluster();
    for i in 0..5 {
        create(&c, cm(&format!("p{i}"), &[]));
    }
    let t = rt(&c, "", "v1", "configmaps");
    let first = c
        .lock()
        .list(
            &t,
            Some("default"),
            &ListOptions {
                limit: Some(2),
                ..ListOptions::default()
            },
        )
        .unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.remaining, Some(3));
    let mut names: Vec<String> = first.items.iter().map(|o| meta::name(o).to_string()).collect();
    let mut token = first.continue_token;
    while let Some(t2) = token {
        let page = c
            .lock()
            .list(
                &t,
                Some("default"),
                &ListOptions {
                    limit: Some(2),
                    continue_token: Some(t2),
                    ..ListOptions::default()
                },
            )
            .unwrap();
        names.extend(page.items.iter().map(|o| meta::name(o).to_string()));
        token = page.continue_token;
    }
    assert_eq!(names, ["p0", "p1", "p2", "p3", "p4"]);

    let generated = create(&c, json!({"metadata": {"generateName": "gen-"}}));
    assert!(meta::name(&generated).starts_with("gen-") && meta::name(&generated).len() == 9);

    let ev_new = rt(&c, "events.k8s.io", "v1", "events");
    let ev_core = rt(&c, "", "v1", "events");
    let body = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1"},
                      "regarding": {"kind": "Widget", "name": "w"}, "note": "hello", "reason": "Created", "type": "Normal",
                      "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "c", "reportingInstance": "i", "action": "Create"});
    c.write(|s| s.create(&ev_new, "default", body, &opts())).unwrap();
    let core = c.lock().get(&ev_core, "default", "e1").unwrap();
    assert_eq!(
        (core["apiVersion"].as_str(), core["message"].as_str()),
        (Some("v1"), Some("hello"))
    );
    assert_eq!(core["involvedObject"]["name"], "w");
}

#[test]
fn crd_deletion_removes_instances_and_stops_serving() {
    let c = cluster();
    let crd_rt = rt(&c, "apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.dev"},
        "spec": {"group": "example.dev", "scope": "Cluster", "names": {"plural": "things", "kind": "Thing"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let created = c.write(|s| s.create(&crd_rt, "", crd, &opts())).unwrap().object;
    assert_eq!(created["status"]["conditions"][1]["type"], "Established");
    let thing = rt(&c, "example.dev", "v1", "things");
    c.write(|s| {
        s.create(
            &thing,
            "",
            json!({"metadata": {"name": "t"}, "anything": 1}),
            &opts(),
        )
    })
    .unwrap();
    c.write(|s| s.delete(&crd_rt, "", "things.example.dev", &DeleteOptions::default()))
        .unwrap();
    assert!(c.resolve("example.dev", "v1", "things").is_none());
    assert!(c.lock().get(&crd_rt, "", "things.example.dev").is_err());
}

#[test]
fn create_refuses_a_resource_version_and_update_checks_the_uid() {
    let c = cluster();
    let created = create(&c, cm("a", &[]));
    let t = rt(&c, "", "v1", "configmaps");
    let mut again = created.clone();
    again["metadata"]["name"] = json!("b");
    let err = c.write(|s| s.create(&t, "default", again, &opts())).unwrap_err();
    assert_eq!(err.code, 500);
    let mut other = created.clone();
    other["metadata"]["uid"] = json!("someone-else");
    let err = c
        .write(|s| s.update(&t, "default", "a", other, Scope::Whole, &opts()))
        .unwrap_err();
    assert_eq!((err.code, err.reason), (409, "Conflict"));
}

#[test]
fn a_moved_storage_version_makes_a_no_op_update_write_and_a_deprecated_version_warns() {
    let c = cluster();
    let crd_rt = rt(&c, "apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let schema = json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    let crd = |storage_v2: bool| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.dev"},
        "spec": {"group": "example.dev", "scope": "Cluster", "names": {"plural": "things", "kind": "Thing"},
                 "versions": [{"name": "v2", "served": true, "storage": storage_v2, "schema": schema},
                              {"name": "v1", "served": true, "storage": !storage_v2, "schema": schema,
                               "deprecated": true}]}})
    };
    let created = c
        .write(|s| s.create(&crd_rt, "", crd(false), &opts()))
        .unwrap()
        .object;
    let v1 = rt(&c, "example.dev", "v1", "things");
    assert_eq!(
        v1.deprecation_warning.as_deref(),
        Some("example.dev/v1 Thing is deprecated")
    );
    assert_eq!(rt(&c, "example.dev", "v2", "things").deprecation_warning, None);
    let thing = c
        .write(|s| s.create(&v1, "", json!({"metadata": {"name": "t"}}), &opts()))
        .unwrap()
        .object;
    let rewrite = |c: &Cluster, body: &Value| {
        let v2 = rt(c, "example.dev", "v2", "things");
        let mut body = body.clone();
        body["apiVersion"] = json!("example.dev/v2");
        let out = c
            .write(|s| s.update(&v2, "", "t", body, Scope::Whole, &opts()))
            .unwrap();
        out.object["metadata"]["resourceVersion"].clone()
    };
    // Same storage version: a no-op update is not written.
    assert_eq!(rewrite(&c, &thing), thing["metadata"]["resourceVersion"]);
    let mut moved = crd(true);
    moved["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    c.write(|s| s.update(&crd_rt, "", "things.example.dev", moved, Scope::Whole, &opts()))
        .unwrap();
    // Stored as v1, now stored as v2: the same update is written, once.
    let rewritten = rewrite(&c, &thing);
    assert_ne!(rewritten, thing["metadata"]["resourceVersion"]);
    let mut again = thing.clone();
    again["metadata"]["resourceVersion"] = rewritten.clone();
    assert_eq!(rewrite(&c, &again), rewritten);
}
