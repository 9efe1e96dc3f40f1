//! The orphan sweeper with nothing configured (a default Helm install sets no orphanProjects /
//! orphanZones / orphanRegions): it sweeps every place the custom resources use, remembers those
//! places in its summary ConfigMap, and so still finds an orphan after its owner is gone and after
//! a restart. Through the real controllers against kube-emulator (or the real control plane) and
//! gcp-emulator. Also: Compute Engine slices (`provisioner: ComputeEngine`) whose TpuSlice was
//! force-removed are found through their instances and deleted, group, template and policy too.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{find_condition, types},
    tpu_slice::TpuSlice,
};
use tpu_operator_controller::{
    Context,
    kinds::tpu_slice,
    never_shutdown,
    sweeper::{Mode, ResourceKind, SUMMARY_CONFIGMAP, Sweeper, SweeperConfig},
};
use tpu_operator_gcp::tpu_v2::model::Node;

const STEP: Duration = Duration::from_secs(20);
const ZONE: &str = "asia-northeast1-b";

fn is_ready(s: &TpuSlice) -> bool {
    s.status
        .as_ref()
        .and_then(|st| find_condition(&st.conditions, types::READY))
        .is_some_and(|c| c.status == "True")
}

#[tokio::test]
async fn with_nothing_configured_the_sweeper_sweeps_where_objects_are_and_remembers_it() {
    let mut env = TestEnv::start().await;
    let ctx: Arc<Context> = Arc::new(env.context().await);
    env.spawn(tpu_slice::run(ctx.clone(), never_shutdown()));
    let slice: TpuSlice = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": "somewhere"},
        "spec": {
            "zone": ZONE,
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": {"spot": {}},
        },
    }))
    .unwrap();
    env.create(&slice).await;
    env.wait_for::<TpuSlice, _>("somewhere", "Ready", STEP, is_ready)
        .await;

    // A node of this cluster in the same zone whose owner is gone.
    let labels = [
        ("managed-by", "tpu-operator"),
        ("tpu-operator-cluster", "test-cluster"),
        ("tpu-operator-namespace", env.ns.as_str()),
        ("tpu-operator-name", "forgotten"),
        ("tpu-operator-uid", "0badc0de-0000-4000-8000-000000000000"),
    ];
    let parent = format!("projects/demo-project/locations/{ZONE}");
    ctx.gcp
        .tpu
        .create_node(
            &parent,
            "orphan",
            Node::new()
                .set_accelerator_type("v6e-8")
                .set_runtime_version("v2-alpha-tpuv6e")
                .set_labels(labels.iter().map(|(k, v)| (k.to_string(), v.to_string()))),
        )
        .await
        .expect("create a node directly");
    let orphan = format!("{parent}/nodes/orphan");
    env.idle(Duration::from_millis(50), STEP).await;

    // No projects, zones or regions configured: the first sweep learns the slice's place, the
    // second lists it.
    let config = SweeperConfig {
        mode: Mode::Report,
        report_namespace: env.ns.clone(),
        ..SweeperConfig::default()
    };
    assert!(config.projects.is_empty() && config.zones.is_empty() && config.regions.is_empty());
    let sweeper = Sweeper::new(config.clone());
    let first = sweeper.sweep(&ctx).await.expect("sweep");
    assert!(first.orphans.is_empty(), "nothing known yet: {first:#?}");
    let second = sweeper.sweep(&ctx).await.expect("sweep");
    let names: Vec<_> = second.orphans.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, [orphan.as_str()], "{second:#?}");

    // The owner of the only known place goes away, and the operator restarts: the place is read
    // back from the summary ConfigMap, so the orphan is still found.
    let slices = env.api::<TpuSlice>();
    slices
        .delete("somewhere", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<TpuSlice>("somewhere", STEP).await;
    let cm = env.api::<ConfigMap>().get(SUMMARY_CONFIGMAP).await.unwrap();
    let places = cm.data.unwrap()["places"].clone();
    assert!(places.contains(&format!("zone {parent}")), "{places}");
    let restarted = Sweeper::new(config);
    let after = restarted.sweep(&ctx).await.expect("sweep");
    let names: Vec<_> = after.orphans.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, [orphan.as_str()], "{after:#?}");
}

const CE_ZONE: &str = "us-east5-b";

fn compute_engine_slice(name: &str, accelerator: &str) -> TpuSlice {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": name},
        "spec": {
            "zone": CE_ZONE,
            "acceleratorType": accelerator,
            "provisioner": "ComputeEngine",
            "computeEngine": {"image": "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"},
            "capacity": {"onDemand": {}},
        },
    }))
    .expect("TpuSlice fixture")
}

/// Instances, instance templates, resource policies, groups and resize requests.
fn compute_objects(env: &TestEnv) -> [usize; 5] {
    let c = env.gcp.resource_counts();
    [
        c.instances,
        c.instance_templates,
        c.resource_policies,
        c.instance_group_managers,
        c.resize_requests,
    ]
}

/// Deletes the TpuSlice with no controller running and strips its finalizer: the object is gone,
/// its cloud resources stay.
async fn force_remove(env: &TestEnv, name: &str) {
    let api = env.api::<TpuSlice>();
    api.delete(name, &DeleteParams::default()).await.unwrap();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    env.wait_gone::<TpuSlice>(name, STEP).await;
}

/// A single-host Compute Engine slice (one instance) and a 2-host one (a group of two members
/// from a regional template, placed by a workload policy) lose their TpuSlices behind the
/// operator's back: report mode reports one instance and one group (never the members) and
/// touches nothing; delete mode, after the grace period, deletes the instance and the group, then
/// releases the group's template and policy, until nothing is left.
#[tokio::test]
async fn compute_engine_orphans_are_reported_then_deleted_with_the_groups_template_and_policy() {
    let mut env = TestEnv::start().await;
    let before = orphan_a_single_host_and_a_multi_host_slice(&mut env).await;
    let config = SweeperConfig {
        mode: Mode::Report,
        projects: vec!["demo-project".into()],
        zones: vec![CE_ZONE.into()],
        report_namespace: env.ns.clone(),
        ..SweeperConfig::default()
    };
    let group = report_mode_reports_the_instance_and_the_group(&env, &config, before).await;
    let delete = SweeperConfig {
        mode: Mode::Delete,
        ..config
    };
    let releasing = delete_mode_deletes_the_instance_and_the_group(&env, &delete, &group).await;
    pending_release_is_kept_in_the_summary(&env, &releasing).await;
    restarted_sweeper_releases_the_template_and_policy(&env, delete).await;
}

/// Three slices converge, then two lose their TpuSlices behind the operator's back; what is left.
async fn orphan_a_single_host_and_a_multi_host_slice(env: &mut TestEnv) -> [usize; 5] {
    let ctx = env.ctx.clone();
    env.spawn(tpu_slice::run(ctx, never_shutdown()));
    env.create(&compute_engine_slice("single", "v6e-8")).await;
    env.create(&compute_engine_slice("multi", "v5p-16")).await;
    for name in ["single", "multi"] {
        env.wait_for::<TpuSlice, _>(name, "Ready", STEP, is_ready).await;
    }
    // Another live Compute Engine slice in the same zone is never an orphan.
    env.create(&compute_engine_slice("alive", "v6e-8")).await;
    env.wait_for::<TpuSlice, _>("alive", "Ready", STEP, is_ready)
        .await;
    env.stop_all();
    force_remove(env, "single").await;
    force_remove(env, "multi").await;
    let before = compute_objects(env);
    assert_eq!(before, [4, 1, 1, 1, 0], "{:?}", env.gcp.list_resources());
    before
}

/// Report mode reports one instance and one group (never the members) and touches nothing; the group.
async fn report_mode_reports_the_instance_and_the_group(
    env: &TestEnv,
    config: &SweeperConfig,
    before: [usize; 5],
) -> String {
    let report = Sweeper::new(config.clone()).sweep(&env.ctx).await.expect("sweep");
    assert!(report.errors.is_empty(), "{report:#?}");
    let found: Vec<_> = report
        .orphans
        .iter()
        .map(|o| (o.kind, o.owner_name.as_str()))
        .collect();
    assert_eq!(found.len(), 2, "{report:#?}");
    assert!(
        found.contains(&(ResourceKind::ComputeInstance, "single")),
        "{report:#?}"
    );
    assert!(
        found.contains(&(ResourceKind::ComputeInstanceGroup, "multi")),
        "{report:#?}"
    );
    let group = report
        .orphans
        .iter()
        .find(|o| o.kind == ResourceKind::ComputeInstanceGroup)
        .unwrap()
        .name
        .clone();
    assert!(
        group.starts_with(&format!(
            "projects/demo-project/zones/{CE_ZONE}/instanceGroupManagers/"
        )),
        "{group}"
    );
    assert!(report.deleted.is_empty());
    assert_eq!(compute_objects(env), before, "report mode touches nothing");
    let cm = env.api::<ConfigMap>().get(SUMMARY_CONFIGMAP).await.unwrap();
    let data = cm.data.unwrap();
    assert!(
        data["orphans"].contains("compute.instance ")
            && data["orphans"].contains(&format!("compute.instanceGroupManager {group}")),
        "{data:#?}"
    );
    group
}

/// Delete mode deletes the instance and the group after the grace period; the pending releases.
async fn delete_mode_deletes_the_instance_and_the_group(
    env: &TestEnv,
    config: &SweeperConfig,
    group: &str,
) -> Vec<String> {
    // The first sweep starts the grace period, the next one (an hour later) deletes; the
    // template and policy the group held wait for it to be gone.
    let sweeper = Sweeper::new(config.clone());
    let first = sweeper.sweep(&env.ctx).await.expect("sweep");
    assert_eq!(first.orphans.len(), 2);
    assert!(first.deleted.is_empty(), "grace period: {first:#?}");
    env.gcp.clock().advance(Duration::from_secs(3600));
    let due = sweeper.sweep(&env.ctx).await.expect("sweep");
    assert_eq!(due.deleted.len(), 2, "{due:#?}");
    assert!(due.deleted.iter().any(|d| d == group), "{due:#?}");
    assert_eq!(
        due.releasing.len(),
        1,
        "the group's template and policy wait: {due:#?}"
    );
    due.releasing
}

/// The group finishes deleting with no sweep running; the pending release stays in the summary.
async fn pending_release_is_kept_in_the_summary(env: &TestEnv, releasing: &[String]) {
    for _ in 0..30 {
        if env.gcp.resource_counts().instance_group_managers == 0 {
            break;
        }
        env.idle(Duration::from_millis(20), STEP).await;
    }
    assert_eq!(
        compute_objects(env),
        [1, 1, 1, 0, 0],
        "{:?}",
        env.gcp.list_resources()
    );
    let cm = env.api::<ConfigMap>().get(SUMMARY_CONFIGMAP).await.unwrap();
    assert_eq!(cm.data.unwrap()["releases"], releasing[0]);
}

/// After a restart the release is read back (no member is left to name the group) and finished.
async fn restarted_sweeper_releases_the_template_and_policy(env: &TestEnv, config: SweeperConfig) {
    // The sweeps go on, the cloud clock advancing, until the template and policy are released.
    let sweeper = Sweeper::new(config);
    let mut released = Vec::new();
    for _ in 0..30 {
        env.idle(Duration::from_millis(50), STEP).await;
        let r = sweeper.sweep(&env.ctx).await.expect("sweep");
        assert!(r.errors.is_empty(), "{r:#?}");
        released.extend(r.released);
        if compute_objects(env) == [1, 0, 0, 0, 0] && r.releasing.is_empty() {
            break;
        }
    }
    assert_eq!(
        compute_objects(env),
        [1, 0, 0, 0, 0],
        "only the live slice's instance is left: {:?}",
        env.gcp.list_resources()
    );
    assert_eq!(released.len(), 1, "{released:?}");
    let last = sweeper.sweep(&env.ctx).await.expect("sweep");
    assert!(last.orphans.is_empty() && last.releasing.is_empty(), "{last:#?}");
    let cm = env.api::<ConfigMap>().get(SUMMARY_CONFIGMAP).await.unwrap();
    assert!(!cm.data.unwrap().contains_key("releases"));
}

// ---- Issue 32, items 7 to 9: the sweeper against a hostile tenant. The tenant writes only
// TpuSlices (spec labels and metadata included); everything else is the operator's doing.

/// Someone else's managed instance group in `CE_ZONE`, made without the operator: an unlabelled
/// regional template and a group of one. Returns the member's `created-by` (what Compute Engine
/// writes on the group's members), once the member exists.
async fn foreign_group(env: &TestEnv, name: &str) -> String {
    use tpu_operator_gcp::{
        ComputeApi, Place,
        compute::convert::{Provisioning, SliceRequest, manager_body, template_body},
    };
    let req = SliceRequest {
        project: "demo-project".into(),
        zone: CE_ZONE.into(),
        id: name.into(),
        machine_type: "ct6e-standard-8t".into(),
        hosts: 1,
        topology: "2x4".into(),
        accelerator_type: "v6e-8".into(),
        image: "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts".into(),
        boot_disk_gb: 100,
        provisioning: Provisioning::Standard,
        labels: Default::default(),
        metadata: Default::default(),
        network: None,
        subnetwork: None,
        external_ips: false,
        tags: Vec::new(),
        service_account: None,
        description: "the platform team's own group".into(),
    };
    let compute: &dyn ComputeApi = env.ctx.gcp.compute.as_ref();
    let region = Place::new("demo-project", "us-east5");
    compute
        .insert_instance_template(
            &region,
            "00000000-0000-4000-8000-000000000001",
            template_body(&req),
        )
        .await
        .expect("insert a foreign template");
    env.idle(Duration::from_millis(20), STEP).await;
    compute
        .insert_instance_group_manager(
            &Place::new("demo-project", CE_ZONE),
            "00000000-0000-4000-8000-000000000002",
            manager_body(&req),
        )
        .await
        .expect("insert a foreign group");
    for _ in 0..50 {
        let created_by = env.gcp.instances().iter().find_map(|i| {
            let items = i["metadata"]["items"].as_array()?;
            let value = items.iter().find(|m| m["key"] == "created-by")?["value"].as_str()?;
            value
                .ends_with(&format!("/instanceGroupManagers/{name}"))
                .then(|| value.to_owned())
        });
        if let Some(created_by) = created_by {
            return created_by;
        }
        env.idle(Duration::from_millis(20), STEP).await;
    }
    panic!("the foreign group has no member: {:?}", env.gcp.list_resources());
}

/// A single-host Compute Engine slice whose spec sets instance metadata `created-by`.
fn slice_claiming(name: &str, created_by: &str) -> TpuSlice {
    let mut slice = compute_engine_slice(name, "v6e-8");
    slice.spec.metadata.insert("created-by".into(), created_by.into());
    slice
}

/// Makes the tenant's slices (Ready), then orphans them behind the operator's back.
async fn orphan_slices(env: &mut TestEnv, slices: &[TpuSlice]) {
    let ctx = env.ctx.clone();
    env.spawn(tpu_slice::run(ctx, never_shutdown()));
    for s in slices {
        env.create(s).await;
    }
    for s in slices {
        let name = s.metadata.name.clone().unwrap();
        env.wait_for::<TpuSlice, _>(&name, "Ready", STEP, is_ready).await;
    }
    env.stop_all();
    for s in slices {
        force_remove(env, s.metadata.name.as_deref().unwrap()).await;
    }
}

fn delete_mode(env: &TestEnv) -> SweeperConfig {
    SweeperConfig {
        mode: Mode::Delete,
        projects: vec!["demo-project".into()],
        zones: vec![CE_ZONE.into()],
        report_namespace: env.ns.clone(),
        ..SweeperConfig::default()
    }
}

/// Two delete-mode sweeps an hour apart (past the grace period): the second one's report.
async fn sweep_past_the_grace_period(
    env: &TestEnv,
    sweeper: &Sweeper,
) -> tpu_operator_controller::sweeper::SweepReport {
    let first = sweeper.sweep(&env.ctx).await.expect("sweep");
    assert!(first.deleted.is_empty(), "grace period: {first:#?}");
    env.gcp.clock().advance(Duration::from_secs(3600));
    sweeper.sweep(&env.ctx).await.expect("sweep")
}

/// Issue 32, item 7: a tenant puts `created-by: .../instanceGroupManagers/<someone else's group>`
/// in its slice's metadata and orphans the slice. `--orphans=delete` deleted that group, which
/// carries none of the operator's labels. Now the group is read: its template has no labels of
/// ours, it does not list the tenant's instance, so the claim is false; the tenant's instance
/// (which does carry our labels) is deleted as itself and the foreign group is untouched.
#[tokio::test]
async fn created_by_metadata_never_makes_the_sweeper_delete_a_group_without_our_labels() {
    let mut env = TestEnv::start().await;
    // Named so the tenant's instance (`<ns>-sneaky-<hash>`) reads as one of its members.
    let victim = format!("{}-sneaky", env.ns);
    let created_by = foreign_group(&env, &victim).await;
    orphan_slices(&mut env, &[slice_claiming("sneaky", &created_by)]).await;
    assert_eq!(env.gcp.resource_counts().instance_group_managers, 1);

    let report = sweep_past_the_grace_period(&env, &Sweeper::new(delete_mode(&env))).await;
    let found: Vec<_> = report
        .orphans
        .iter()
        .map(|o| (o.kind, o.owner_name.as_str()))
        .collect();
    assert_eq!(found, [(ResourceKind::ComputeInstance, "sneaky")], "{report:#?}");
    assert!(
        report.deleted.len() == 1 && report.deleted[0].contains("/instances/"),
        "{report:#?}"
    );
    for _ in 0..20 {
        env.idle(Duration::from_millis(20), STEP).await;
    }
    let groups = env.gcp.instance_group_managers();
    assert_eq!(
        groups.len(),
        1,
        "the foreign group is untouched: {:?}",
        env.gcp.list_resources()
    );
    assert_eq!(groups[0]["name"], victim.as_str());
    let instances = env.gcp.instances();
    assert_eq!(
        instances.len(),
        1,
        "only its member is left: {:?}",
        env.gcp.list_resources()
    );
    assert_eq!(env.gcp.call_count("compute", "instanceGroupManagers.delete"), 0);
}

/// Issue 32, item 8: an orphaned instance whose metadata `created-by` names something else (a
/// group in another zone, an unmanaged group, a group that does not exist) was never reported.
/// It carries our labels, so it is ours: reported as an instance and, in delete mode, deleted.
#[tokio::test]
async fn an_orphan_is_found_whatever_its_created_by_metadata_says() {
    let mut env = TestEnv::start().await;
    let ns = env.ns.clone();
    let slices = [
        slice_claiming(
            "elsewhere",
            "projects/1/zones/us-east5-a/instanceGroupManagers/elsewhere",
        ),
        slice_claiming("unmanaged", "projects/1/zones/us-east5-b/instanceGroups/gke-pool"),
        // Reads like a member of `<ns>-nogroup`, which does not exist.
        slice_claiming(
            "nogroup",
            &format!("projects/1/zones/{CE_ZONE}/instanceGroupManagers/{ns}-nogroup"),
        ),
    ];
    orphan_slices(&mut env, &slices).await;
    assert_eq!(env.gcp.resource_counts().instances, 3);

    let report = sweep_past_the_grace_period(&env, &Sweeper::new(delete_mode(&env))).await;
    let mut found: Vec<_> = report
        .orphans
        .iter()
        .map(|o| (o.kind, o.owner_name.as_str()))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            (ResourceKind::ComputeInstance, "elsewhere"),
            (ResourceKind::ComputeInstance, "nogroup"),
            (ResourceKind::ComputeInstance, "unmanaged"),
        ],
        "{report:#?}"
    );
    assert_eq!(report.deleted.len(), 3, "{report:#?}");
    for _ in 0..50 {
        if env.gcp.resource_counts().instances == 0 {
            break;
        }
        env.idle(Duration::from_millis(20), STEP).await;
    }
    assert_eq!(
        compute_objects(&env),
        [0, 0, 0, 0, 0],
        "{:?}",
        env.gcp.list_resources()
    );
}

/// Zones one sweep lists (queued resources and Compute Engine instances: one of each per zone
/// listed). TPU nodes are listed once per zone too, but the cloud watch also lists them for the
/// READY Spot slices that wait on their nodes, so their count is only a lower bound here.
async fn zones_listed(env: &TestEnv, sweeper: &Sweeper, ctx: &Context) -> u64 {
    env.gcp.clear_calls();
    let report = sweeper.sweep(ctx).await.expect("sweep");
    assert!(report.orphans.is_empty(), "{report:#?}");
    let zones = env.gcp.call_count("tpu", "queuedResources.list");
    assert_eq!(zones, env.gcp.call_count("compute", "instances.list"));
    assert!(env.gcp.call_count("tpu", "nodes.list") >= zones);
    zones
}

fn summary_places(data: &std::collections::BTreeMap<String, String>) -> Vec<&str> {
    data.get("places")
        .map(|p| p.lines().collect())
        .unwrap_or_default()
}

fn report_mode(env: &TestEnv) -> SweeperConfig {
    SweeperConfig {
        mode: Mode::Report,
        report_namespace: env.ns.clone(),
        ..SweeperConfig::default()
    }
}

/// Issue 32, item 9: 25 slices naming bogus zones, refused by the namespace's TpuPolicy, made
/// every sweep list all 25 zones, forever. Refused objects now teach no place; and once the one
/// admitted slice is gone, its place is listed until a sweep finds nothing there, then forgotten.
#[tokio::test]
async fn refused_objects_teach_no_places_and_a_place_nothing_uses_is_forgotten() {
    use tpu_operator_api::tpu_policy::TpuPolicy;
    let mut env = TestEnv::start().await;
    let policy: TpuPolicy = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuPolicy",
        "metadata": {"name": format!("pol-{}", env.ns)},
        "spec": {"namespaces": [env.ns.clone()], "allowedZones": [ZONE]},
    }))
    .unwrap();
    kube::Api::<TpuPolicy>::all(env.client.clone())
        .create(&Default::default(), &policy)
        .await
        .expect("create the TpuPolicy");
    let ctx = Arc::new(env.context().await);
    env.spawn(tpu_slice::run(ctx.clone(), never_shutdown()));
    env.create(&tpu_vm_slice("allowed", ZONE)).await;
    env.wait_for::<TpuSlice, _>("allowed", "Ready", STEP, is_ready)
        .await;
    for i in 0..25 {
        env.create(&tpu_vm_slice(&format!("bogus-{i}"), &format!("bogus-zone{i}-a")))
            .await;
    }
    for i in 0..25 {
        env.wait_for::<TpuSlice, _>(&format!("bogus-{i}"), "refused", STEP, |s| {
            stalled_reason(s) == Some("PolicyDenied")
        })
        .await;
    }

    let sweeper = Sweeper::new(report_mode(&env));
    assert_eq!(zones_listed(&env, &sweeper, &ctx).await, 0, "nothing learned yet");
    assert_eq!(
        zones_listed(&env, &sweeper, &ctx).await,
        1,
        "only the admitted slice's zone"
    );
    let cm = env.api::<ConfigMap>().get(SUMMARY_CONFIGMAP).await.unwrap();
    let data = cm.data.unwrap();
    let places = summary_places(&data);
    assert!(
        places.len() == 1 && places[0].starts_with(&format!("zone projects/demo-project/locations/{ZONE}")),
        "{places:?}"
    );

    // The admitted slice goes (its finalizer deletes the node); the refused ones stay. The next
    // sweep still lists the place (it was in use when the sweep began), finds nothing and the
    // place is forgotten: from then on nothing is listed.
    env.api::<TpuSlice>()
        .delete("allowed", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<TpuSlice>("allowed", STEP).await;
    assert_eq!(zones_listed(&env, &sweeper, &ctx).await, 1);
    assert_eq!(zones_listed(&env, &sweeper, &ctx).await, 1);
    assert_eq!(zones_listed(&env, &sweeper, &ctx).await, 0, "forgotten");
    let cm = env.api::<ConfigMap>().get(SUMMARY_CONFIGMAP).await.unwrap();
    assert!(summary_places(&cm.data.unwrap()).is_empty());
    // A restarted operator does not bring it back.
    assert_eq!(
        zones_listed(&env, &Sweeper::new(report_mode(&env)), &ctx).await,
        0
    );
}

/// Issue 32, item 9: a namespace makes the sweeper list at most 16 learned places, however many
/// its objects name; the rest are named in the summary (`placesOverBound`).
#[tokio::test]
async fn one_namespace_makes_the_sweeper_list_at_most_16_learned_places() {
    let env = TestEnv::start().await;
    // No controller runs: nothing refuses them, so each teaches its zone.
    for i in 0..20 {
        env.create(&tpu_vm_slice(&format!("s{i}"), &format!("us-central{i}-a")))
            .await;
    }
    let sweeper = Sweeper::new(report_mode(&env));
    assert_eq!(zones_listed(&env, &sweeper, &env.ctx).await, 0);
    assert_eq!(zones_listed(&env, &sweeper, &env.ctx).await, 16);
    let cm = env.api::<ConfigMap>().get(SUMMARY_CONFIGMAP).await.unwrap();
    let data = cm.data.unwrap();
    assert_eq!(summary_places(&data).len(), 16, "{data:#?}");
    let over = data.get("placesOverBound").map(|o| o.lines().count());
    assert_eq!(over, Some(4), "{data:#?}");
}

/// A capacity plan teaches the sweeper only the zones it has asked, not every zone it names: a
/// slice waiting on its first rung makes no listing of the other rungs' zones.
#[tokio::test]
async fn a_capacity_plan_teaches_only_the_zones_it_asked() {
    let env = TestEnv::start().await;
    let mut planned = serde_json::to_value(tpu_vm_slice("planned", "us-central1-a")).unwrap();
    planned["spec"]["capacity"] = serde_json::Value::Null;
    planned["spec"]["capacityPlan"] = json!({"rungs": [
        {"spot": {}},
        {"onDemand": {}, "zones": ["us-central2-a", "us-central3-a", "us-central4-a", "us-central5-a"]},
    ]});
    env.create(&serde_json::from_value::<TpuSlice>(planned).unwrap())
        .await;
    let sweeper = Sweeper::new(report_mode(&env));
    assert_eq!(zones_listed(&env, &sweeper, &env.ctx).await, 0);
    assert_eq!(
        zones_listed(&env, &sweeper, &env.ctx).await,
        1,
        "only spec.zone, where the first rung asks"
    );
}

fn tpu_vm_slice(name: &str, zone: &str) -> TpuSlice {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": name},
        "spec": {
            "zone": zone,
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": {"spot": {}},
        },
    }))
    .unwrap()
}

fn stalled_reason(s: &TpuSlice) -> Option<&str> {
    s.status
        .as_ref()
        .and_then(|st| find_condition(&st.conditions, types::STALLED))
        .filter(|c| c.status == "True")
        .map(|c| c.reason.as_str())
}
