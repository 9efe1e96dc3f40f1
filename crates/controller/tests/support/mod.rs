//! End-to-end harness: the controllers run in-process against a Kubernetes API server and
//! `gcp-emulator` (over HTTP, through Google's real clients) with the emulator's manual clock.
//! The API server is an in-process `kube-emulator` by default, or the real control plane with
//! `TPU_OPERATOR_KUBE=real` (`kube_conformance::target`, see docs/testing.md). On the real server
//! each test gets its own namespace and its controllers watch only that namespace, so tests that
//! run in parallel (each with its own gcp-emulator) never reconcile each other's objects.
//! Each test file includes it with `mod support;`.
#![allow(dead_code)]

use std::{fmt::Debug, future::Future, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Resource,
    api::{Patch, PatchParams, PostParams},
};
use kube_conformance::TestCluster;
use serde::{Serialize, de::DeserializeOwned};
use tpu_operator_controller::{
    Context, ControllerConfig,
    governance::tenancy::{Policies, WithoutPolicy},
    runtime::{backoff::BackoffPolicy, clock::FnClock},
};
use tpu_operator_gcp::{Gcp, GcpConfig, GcpMetrics};

/// The namespace of every test against kube-emulator (each test has a server of its own).
pub const EMULATOR_NS: &str = "default";

pub struct TestEnv {
    cluster: TestCluster,
    pub client: kube::Client,
    /// Where this test's objects live and the only namespace its controllers watch.
    pub ns: String,
    pub gcp: gcp_emulator::Emulator,
    pub ctx: Arc<Context>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Real time `wait_for` / `wait_gone` allow before failing (see [`wait_limit`]).
    wait_limit: Duration,
}

/// How long a wait may take in real time. Only a failing test ever waits this long, so the limit
/// is generous where the machine is slow for reasons outside the test: the real control plane
/// shares two cores with etcd, kube-controller-manager and parallel tests (60 s timed out there
/// under load). `TPU_OPERATOR_E2E_WAIT_SECS` overrides both.
fn wait_limit(real_server: bool) -> Duration {
    let default = if real_server { 240 } else { 60 };
    let secs = std::env::var("TPU_OPERATOR_E2E_WAIT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    Duration::from_secs(secs)
}

pub fn start_time() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-02T09:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

impl TestEnv {
    pub async fn start() -> Self {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let cluster = TestCluster::connect()
            .await
            .expect("connect to the Kubernetes target (TPU_OPERATOR_KUBE)");
        let client = cluster.client.clone();
        let ns = match cluster.emulator_handle() {
            Some(kube) => {
                kube.install_crds_from_dir(&crds_dir())
                    .expect("install the project's CRDs");
                EMULATOR_NS.to_owned()
            }
            None => {
                install_crds_on_real_server(&client).await;
                create_test_namespace(&client).await
            }
        };
        let gcp = gcp_emulator::Emulator::builder()
            .manual_clock(start_time())
            .start()
            .await
            .expect("gcp-emulator");
        let ctx = Arc::new(Self::context_for(&client, &gcp, &ns).await);
        let wait_limit = wait_limit(cluster.emulator_handle().is_none());
        Self {
            cluster,
            client,
            ns,
            gcp,
            ctx,
            tasks: Vec::new(),
            wait_limit,
        }
    }

    /// The in-process kube-emulator, for tests that need its hooks (swapping a CRD); `None` on
    /// the real control plane, where such a test skips with a printed reason.
    pub fn kube(&self) -> Option<&kube_emulator::KubeEmulator> {
        self.cluster.emulator_handle()
    }

    /// A fresh controller context, as a restarted operator process would build it.
    pub async fn context(&self) -> Context {
        Self::context_for(&self.client, &self.gcp, &self.ns).await
    }

    async fn context_for(client: &kube::Client, gcp: &gcp_emulator::Emulator, ns: &str) -> Context {
        let clients = Gcp::connect(
            GcpConfig::emulator(gcp.url().parse().expect("emulator URL")),
            GcpMetrics::new(),
        )
        .await
        .expect("GCP clients");
        let config = ControllerConfig {
            cluster_id: "test-cluster".into(),
            default_project: Some("demo-project".into()),
            namespace: Some(ns.to_owned()),
            concurrency: 8,
            poll_active: Duration::from_millis(20),
            poll_stable: Duration::from_millis(500),
            poll_capacity: Duration::from_millis(50),
            watch_lists: true,
            poll_watched: Duration::from_millis(500),
            poll_checkpoints: ControllerConfig::default().poll_checkpoints,
        };
        let clock = gcp.clock();
        let policies = Policies::watch(client.clone(), Some(ns), WithoutPolicy::Allow);
        Context::new(client.clone(), clients, config)
            .with_policies(policies)
            .with_clock(Arc::new(FnClock(move || clock.now())))
            .with_backoff(BackoffPolicy {
                base: Duration::from_millis(20),
                max: Duration::from_millis(400),
            })
    }

    /// Runs a controller future in the background until the env is dropped or `stop_all` is called.
    pub fn spawn<F: Future<Output = ()> + Send + 'static>(&mut self, fut: F) {
        self.tasks.push(tokio::spawn(fut));
    }

    /// Kills every running controller (as SIGKILL would: no cleanup runs).
    pub fn stop_all(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub async fn create<K>(&self, obj: &K) -> K
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        let mut obj = obj.clone();
        obj.meta_mut().namespace = Some(self.ns.clone());
        self.api::<K>()
            .create(&PostParams::default(), &obj)
            .await
            .expect("create object")
    }

    /// Polls `name` until `pred` holds, advancing the emulator clock by `step` between polls, so
    /// cloud state machines progress. Panics with the last seen object after [`wait_limit`].
    pub async fn wait_for<K, F>(&self, name: &str, what: &str, step: Duration, pred: F) -> K
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + DeserializeOwned,
        F: Fn(&K) -> bool,
    {
        let api = self.api::<K>();
        let deadline = tokio::time::Instant::now() + self.wait_limit;
        let mut last = None;
        loop {
            if let Some(obj) = api.get_opt(name).await.expect("get object") {
                if pred(&obj) {
                    return obj;
                }
                last = Some(obj);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}; last seen: {last:#?}"
            );
            self.gcp.clock().advance(step);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Polls the Events about `regarding` until one has `reason`, and returns all of them then.
    /// Controllers publish a transition's Events after its status write, so a test that saw the
    /// status must wait for the Event rather than list once. Advances the clock like `wait_for`.
    pub async fn wait_for_event(
        &self,
        regarding: &str,
        reason: &str,
        step: Duration,
    ) -> Vec<k8s_openapi::api::events::v1::Event> {
        let api = self.api::<k8s_openapi::api::events::v1::Event>();
        let deadline = tokio::time::Instant::now() + self.wait_limit;
        loop {
            let events: Vec<_> = api
                .list(&Default::default())
                .await
                .expect("list events")
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding))
                .collect();
            if events.iter().any(|e| e.reason.as_deref() == Some(reason)) {
                return events;
            }
            let seen: Vec<_> = events.iter().filter_map(|e| e.reason.clone()).collect();
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for a {reason} event about {regarding}; seen: {seen:?}"
            );
            self.gcp.clock().advance(step);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Polls until the object is gone (finalizers done), advancing the clock like `wait_for`.
    pub async fn wait_gone<K>(&self, name: &str, step: Duration)
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + DeserializeOwned,
    {
        let api = self.api::<K>();
        let deadline = tokio::time::Instant::now() + self.wait_limit;
        while let Some(obj) = api.get_opt(name).await.expect("get object") {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for deletion of {obj:#?}"
            );
            self.gcp.clock().advance(step);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Lets the controllers run for `real` time while the cloud clock advances, e.g. to check
    /// that nothing else happens after convergence.
    pub async fn idle(&self, real: Duration, step: Duration) {
        let end = tokio::time::Instant::now() + real;
        while tokio::time::Instant::now() < end {
            self.gcp.clock().advance(step);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        self.stop_all();
    }
}

fn crds_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds")
}

/// Applies the committed CRDs (server-side apply, idempotent across parallel tests) and waits
/// until each is Established.
async fn install_crds_on_real_server(client: &kube::Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("tpu-operator-e2e").force();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(crds_dir()).expect("read crds/") {
        let path = entry.expect("crds/ entry").path();
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(&std::fs::read_to_string(&path).expect("read CRD")).expect("CRD YAML");
        let name = crd.metadata.name.clone().expect("CRD name");
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
        names.push(name);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for name in names {
        loop {
            let crd = api.get(&name).await.expect("get CRD");
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "CRD {name} not Established"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A namespace of this test's own on the shared real server (left for the throwaway cluster to
/// take away: deleting it would wait on finalizers of controllers the test already stopped).
async fn create_test_namespace(client: &kube::Client) -> String {
    use k8s_openapi::api::core::v1::Namespace;
    let api: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.metadata.generate_name = Some("e2e-".into());
    api.create(&PostParams::default(), &ns)
        .await
        .expect("create the test namespace")
        .metadata
        .name
        .expect("generated namespace name")
}

/// Parses one YAML document into a typed object.
pub fn from_yaml<K: DeserializeOwned>(yaml: &str) -> K {
    serde_yaml::from_str(yaml).expect("fixture YAML")
}
