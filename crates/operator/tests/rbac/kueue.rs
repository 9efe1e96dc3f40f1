//! The chart's Kueue RBAC (`kueue.enabled=true`), proven as the operator runs: helm install,
//! `tpu-operator run` as the chart's ServiceAccount, the real Kueue manager admitting, queueing
//! and positioning the operator's Workloads. Every Kueue call the integration makes happens here
//! as that identity: Workloads created, watched, read, changed (a relabelled slice's priority
//! class), deleted (a finished pipeline's, a deleted slice's), a WorkloadPriorityClass read,
//! WorkloadPriorityClasses and LocalQueues watched (what a waiting object awaits), a position
//! read from the visibility API, and the start-up check of Kueue's CRD; any `forbidden`
//! in the log fails it. Runs where Kueue runs (the Kueue stage of scripts/ci-control-plane.sh,
//! under tests/kueue/up.sh), Namespace scope: the narrower grant (a Role in the watched
//! namespace, ClusterRoles only for cluster-scoped reads).

use kube::{
    Api,
    api::{DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams},
    discovery::ApiResource,
};
use serde_json::{Value, json};
use tpu_operator_api::{TpuSlice, TrainingPipeline};

use super::{Install, example, no_forbidden_requests, wait, wait_cloud_empty, wait_leader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_kueue_rbac_suffices_as_the_service_account() {
    if std::env::var_os("TPU_OPERATOR_KUEUE_DIR").is_none() {
        eprintln!("NOTICE: no Kueue running; the Kueue stage of scripts/ci-control-plane.sh runs this");
        return;
    }
    let kubeconfig = match test_kit::target().expect("TPU_OPERATOR_KUBE / KUBECONFIG") {
        test_kit::Target::Real { kubeconfig } => kubeconfig,
        test_kit::Target::Emulator => return,
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let admin = test_kit::real_client(&kubeconfig).await.expect("admin client");
    let gcp = gcp_emulator::Emulator::builder()
        .time_scale(600.0)
        .start()
        .await
        .expect("gcp-emulator");
    let install = Install::new(&kubeconfig, &admin, "Namespace", true).await;
    let scope = "Namespace+Kueue";
    let class = format!("{}-low", install.release);
    queues(&admin, &install.tenant, &class).await;
    let mut replicas = [install.replica(&format!("{}-a", install.release), &gcp)];
    wait_leader(&admin, &install.namespace, &replicas).await;

    // One 8-chip v5e slice fills its flavor; a second waits, with its priority class read and its
    // position from the visibility API.
    let slices: Api<TpuSlice> = Api::namespaced(admin.clone(), &install.tenant);
    let hog = install.create(&admin, gated_slice("hog", None)).await;
    wait(&format!("{hog} Ready after admission"), async || {
        let st = slices.get(&hog).await.ok()?.status?;
        (st.kueue.as_ref()?.admitted && format!("{:?}", st.phase) == "Ready").then_some(())
    })
    .await;
    let waiter = install.create(&admin, gated_slice("waiter", Some(&class))).await;
    // The position comes from Kueue's visibility API, where the harness serves it.
    let visibility = std::env::var("TPU_OPERATOR_KUEUE_VISIBILITY").is_ok_and(|v| v == "1");
    let position = wait(&format!("{waiter} queued (with its position)"), async || {
        let st = slices.get(&waiter).await.ok()?.status?;
        let k = st.kueue.as_ref()?;
        match (visibility, k.position) {
            (true, None) => None,
            (_, position) => (!k.admitted && k.workload.starts_with("tpuslice-")).then_some(position),
        }
    })
    .await;
    if visibility {
        assert_eq!(position, Some(1));
    }
    println!("rbac[{scope}]: {hog} admitted and Ready; {waiter} queued at position {position:?}");

    let queued_as = relabel(
        &admin,
        &install.tenant,
        &waiter,
        &format!("{}-high", install.release),
    )
    .await;
    println!("rbac[{scope}]: {waiter} relabelled; its Workload {queued_as} changed in place");

    // A gated pipeline (the v6e flavor) runs to Succeeded; its Workload is then deleted.
    let mut pipeline = example("quickstart.yaml");
    pipeline.metadata.labels = Some([("kueue.x-k8s.io/queue-name".to_string(), "tpu".to_string())].into());
    let name = install.create(&admin, pipeline).await;
    let pipelines: Api<TrainingPipeline> = Api::namespaced(admin.clone(), &install.tenant);
    let done = wait(&format!("{name} Succeeded through Kueue"), async || {
        let p = pipelines.get(&name).await.ok()?;
        let phase = serde_json::to_value(p.status.as_ref()?.phase).ok()?;
        (phase == "Succeeded").then_some(p)
    })
    .await;
    let workload = done.status.unwrap().kueue.expect("status.kueue").workload;
    let workloads: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &install.tenant,
        &kueue_resource("Workload", "workloads"),
    );
    wait(&format!("{workload} deleted once the run is over"), async || {
        workloads.get_opt(&workload).await.ok()?.is_none().then_some(())
    })
    .await;
    println!("rbac[{scope}]: TrainingPipeline/{name} Succeeded; its Workload {workload} deleted");

    // Deleting the slice deletes its Workload, which admits the one waiting.
    slices.delete(&hog, &DeleteParams::default()).await.unwrap();
    wait(&format!("{waiter} admitted once {hog} is gone"), async || {
        let st = slices.get(&waiter).await.ok()?.status?;
        st.kueue.as_ref()?.admitted.then_some(())
    })
    .await;
    slices.delete(&waiter, &DeleteParams::default()).await.unwrap();
    pipelines.delete(&name, &DeleteParams::default()).await.unwrap();
    wait_cloud_empty(&gcp, &replicas).await;
    println!("rbac[{scope}]: {waiter} admitted after {hog} went; cloud resources left: 0");
    no_forbidden_requests(scope, &mut replicas);
}

/// Relabels the queued slice `waiter` with WorkloadPriorityClass `higher` (value 200, applied by
/// the administrator): its own Workload is changed in place (`patch` on workloads), not replaced.
/// Returns the Workload's name.
async fn relabel(admin: &kube::Client, tenant: &str, waiter: &str, higher: &str) -> String {
    apply(
        admin,
        None,
        json!({"kind": "WorkloadPriorityClass", "metadata": {"name": higher}, "value": 200}),
    )
    .await;
    let slices: Api<TpuSlice> = Api::namespaced(admin.clone(), tenant);
    let relabel = json!({"metadata": {"labels": {"kueue.x-k8s.io/priority-class": higher}}});
    slices
        .patch(waiter, &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .unwrap();
    let queued_as = slices
        .get(waiter)
        .await
        .unwrap()
        .status
        .unwrap()
        .kueue
        .unwrap()
        .workload;
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), tenant, &kueue_resource("Workload", "workloads"));
    let before = workloads.get(&queued_as).await.unwrap().metadata.uid;
    wait(&format!("{queued_as} at priority 200"), async || {
        let wl = workloads.get_opt(&queued_as).await.ok()??;
        (wl.data["spec"]["priority"] == 200 && wl.metadata.uid == before).then_some(())
    })
    .await;
    queued_as
}

/// The example v5e slice (8 chips, queued Spot capacity) in LocalQueue `tpu`.
fn gated_slice(name: &str, priority: Option<&str>) -> DynamicObject {
    let mut obj = example("spot-queued-slice.yaml");
    obj.metadata.name = Some(name.into());
    let mut labels =
        std::collections::BTreeMap::from([("kueue.x-k8s.io/queue-name".to_string(), "tpu".to_string())]);
    if let Some(class) = priority {
        labels.insert("kueue.x-k8s.io/priority-class".into(), class.into());
    }
    obj.metadata.labels = Some(labels);
    obj
}

fn kueue_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind), plural)
}

/// Flavors for v5e and v6e (GKE's node labels), a ClusterQueue with 8 chips of each for the
/// tenant's namespace, LocalQueue `tpu` there, and WorkloadPriorityClass `class`; applied by the
/// cluster administrator.
async fn queues(admin: &kube::Client, tenant: &str, class: &str) {
    let flavor = |family: &str| format!("{tenant}-{family}");
    for (family, label) in [("v5e", "tpu-v5-lite-podslice"), ("v6e", "tpu-v6e-slice")] {
        apply(
            admin,
            None,
            json!({"kind": "ResourceFlavor", "metadata": {"name": flavor(family)},
                   "spec": {"nodeLabels": {"cloud.google.com/gke-tpu-accelerator": label}}}),
        )
        .await;
    }
    let quota = |family: &str| json!({"name": flavor(family), "resources": [{"name": "google.com/tpu", "nominalQuota": 8}]});
    apply(
        admin,
        None,
        json!({"kind": "ClusterQueue", "metadata": {"name": tenant}, "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": tenant}},
            "resourceGroups": [{"coveredResources": ["google.com/tpu"],
                                "flavors": [quota("v5e"), quota("v6e")]}]}}),
    )
    .await;
    apply(
        admin,
        Some(tenant),
        json!({"kind": "LocalQueue", "metadata": {"name": "tpu"}, "spec": {"clusterQueue": tenant}}),
    )
    .await;
    apply(
        admin,
        None,
        json!({"kind": "WorkloadPriorityClass", "metadata": {"name": class}, "value": 100}),
    )
    .await;
}

async fn apply(admin: &kube::Client, namespace: Option<&str>, mut obj: Value) {
    let kind = obj["kind"].as_str().unwrap().to_string();
    let plural = match kind.as_str() {
        "WorkloadPriorityClass" => "workloadpriorityclasses".to_string(),
        other => format!("{}s", other.to_lowercase()),
    };
    let ar = kueue_resource(&kind, &plural);
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(admin.clone(), ns, &ar),
        None => Api::all_with(admin.clone(), &ar),
    };
    obj["apiVersion"] = json!("kueue.x-k8s.io/v1beta2");
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    api.patch(
        &name,
        &PatchParams::apply("rbac-kueue").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {kind} {name}: {e}"));
}
