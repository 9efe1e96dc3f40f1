//! End-to-end harness: the controllers run in-process against `kube-emulator` (in-process router)
//! and `gcp-emulator` (over HTTP, through Google's real clients) with the emulator's manual clock.
//! Each test file includes it with `mod support;`.
#![allow(dead_code)]

use std::{fmt::Debug, future::Future, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use kube::{Api, Resource, api::PostParams};
use serde::{Serialize, de::DeserializeOwned};
use tpu_operator_controller::{Context, ControllerConfig, backoff::BackoffPolicy, clock::FnClock};
use tpu_operator_gcp::{Gcp, GcpConfig, GcpMetrics};

pub const NS: &str = "default";

pub struct TestEnv {
    pub kube: kube_emulator::KubeEmulator,
    pub client: kube::Client,
    pub gcp: gcp_emulator::Emulator,
    pub ctx: Arc<Context>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

pub fn start_time() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-02T09:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

impl TestEnv {
    pub async fn start() -> Self {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let kube = kube_emulator::KubeEmulator::new();
        let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds");
        kube.install_crds_from_dir(&crds)
            .expect("install the project's CRDs");
        let client = kube::Client::new(kube.router(), NS);
        let gcp = gcp_emulator::Emulator::builder()
            .manual_clock(start_time())
            .start()
            .await
            .expect("gcp-emulator");
        let ctx = Arc::new(Self::context(&client, &gcp).await);
        Self {
            kube,
            client,
            gcp,
            ctx,
            tasks: Vec::new(),
        }
    }

    /// A fresh controller context, as a restarted operator process would build it.
    pub async fn context(client: &kube::Client, gcp: &gcp_emulator::Emulator) -> Context {
        let clients = Gcp::connect(
            GcpConfig::emulator(gcp.url().parse().expect("emulator URL")),
            GcpMetrics::new(),
        )
        .await
        .expect("GCP clients");
        let config = ControllerConfig {
            cluster_id: "test-cluster".into(),
            default_project: Some("demo-project".into()),
            namespace: None,
            concurrency: 8,
            poll_active: Duration::from_millis(20),
            poll_stable: Duration::from_millis(500),
            poll_capacity: Duration::from_millis(50),
        };
        let clock = gcp.clock();
        Context::new(client.clone(), clients, config)
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
        Api::namespaced(self.client.clone(), NS)
    }

    pub async fn create<K>(&self, obj: &K) -> K
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        self.api::<K>()
            .create(&PostParams::default(), obj)
            .await
            .expect("create object")
    }

    /// Polls `name` until `pred` holds, advancing the emulator clock by `step` between polls, so
    /// cloud state machines progress. Panics with the last seen object after 60 s of real time.
    pub async fn wait_for<K, F>(&self, name: &str, what: &str, step: Duration, pred: F) -> K
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + DeserializeOwned,
        F: Fn(&K) -> bool,
    {
        let api = self.api::<K>();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
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

    /// Polls until the object is gone (finalizers done), advancing the clock like `wait_for`.
    pub async fn wait_gone<K>(&self, name: &str, step: Duration)
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + DeserializeOwned,
    {
        let api = self.api::<K>();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
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

/// Parses one YAML document into a typed object.
pub fn from_yaml<K: DeserializeOwned>(yaml: &str) -> K {
    serde_yaml::from_str(yaml).expect("fixture YAML")
}
