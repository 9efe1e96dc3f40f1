//! [`TestEnv`], the end-to-end harness of the controller suites: the controllers run in-process
//! against a Kubernetes API server and `gcp-emulator` (over HTTP, through Google's real clients)
//! with the emulator's manual clock. The API server is an in-process `kube-emulator` by default,
//! or the real control plane with `TPU_OPERATOR_KUBE=real` ([`crate::target`], see
//! docs/testing.md). On the real server each test gets its own namespace and its controllers watch
//! only that namespace, so tests that run in parallel (each with its own gcp-emulator) never
//! reconcile each other's objects.

use std::{future::Future, path::PathBuf, sync::Arc, time::Duration};

use kube::{Api, Resource};
use tpu_operator_controller::{Context, governance::tenancy::WithoutPolicy};

use crate::{
    ContextSpec, NamespacedObject, Polls, TestCluster, emulators,
    identity::Tenant,
    objects,
    real_server::{create_test_namespace, install_crds_on_real_server},
    wait::wait_limit,
};

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
    pub(crate) wait_limit: Duration,
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
                emulators::install_crds(kube).expect("install the project's CRDs");
                EMULATOR_NS.to_owned()
            }
            None => {
                install_crds_on_real_server(&client).await;
                create_test_namespace(&client).await
            }
        };
        let gcp = emulators::gcp_manual(emulators::start_time()).await;
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
        ContextSpec {
            cluster_id: "test-cluster".into(),
            default_project: "demo-project".into(),
            namespace: Some(ns.to_owned()),
            concurrency: 8,
            polls: Polls::fast(),
            tenancy: Some(WithoutPolicy::Allow),
        }
        .build(client, gcp)
        .await
        .expect("controller context")
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

    pub async fn create<K: NamespacedObject>(&self, obj: &K) -> K {
        objects::create_in(&self.client, &self.ns, obj).await
    }

    /// The tenant of the test's namespace: on the real server its `edit` ServiceAccount, with the
    /// chart's aggregated roles rendered by `helm` (asked for only there; the suites pass
    /// `test_tools::helm`); on kube-emulator the admin client ([`Tenant::of`]).
    pub async fn tenant(&self, helm: impl FnOnce() -> PathBuf) -> Tenant {
        self.tenant_in(&self.ns, helm).await
    }

    /// [`Self::tenant`] of another namespace `ns` (team B in the tenancy suites), which must exist.
    pub async fn tenant_in(&self, ns: &str, helm: impl FnOnce() -> PathBuf) -> Tenant {
        Tenant::of(&self.cluster, &self.client, ns, helm).await
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        self.stop_all();
    }
}
