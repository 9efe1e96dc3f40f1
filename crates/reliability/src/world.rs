//! The two emulators and an operator that can be started, killed and restarted.
//!
//! The in-process operator is the three controllers as tokio tasks (as `tpu-operator run` runs
//! them) on a fresh `Context` each start, the way a new process would build one: new GCP
//! clients, new per-object backoff, empty caches. `kill_operator` aborts the tasks: no
//! finalizer, no status write and no graceful shutdown runs, which is what SIGKILL does to the
//! process (requests already on the wire still reach the servers). `process::OperatorProcess`
//! does the same with the real binary.

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use kube::{
    Api, Resource,
    api::{DeleteParams, ListParams, PostParams},
};
use test_kit::{ContextSpec, NamespacedObject, emulators};
pub use test_kit::{Polls, start_time};
use tpu_operator_api::{PreprocessBatch, TpuSlice, TrainingPipeline};
use tpu_operator_controller::{
    Context,
    kinds::{preprocess_batch, tpu_slice, training_pipeline},
    never_shutdown,
};

use crate::fixtures::{BUCKET, RAW_OBJECT};

pub const NAMESPACE: &str = "default";

struct InProcess {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    ctx: Arc<Context>,
}

struct ProcessMode {
    bin: std::path::PathBuf,
    kubeconfig: std::path::PathBuf,
    extra: Vec<String>,
}

pub struct World {
    pub kube: kube_emulator::KubeEmulator,
    /// In-process client of `kube` (no socket).
    pub client: kube::Client,
    pub gcp: gcp_emulator::Emulator,
    /// How fast the in-process operator polls (the emulator's clock is manual, so these are
    /// real time and only bound how quickly a test converges).
    pub polls: Polls,
    /// Errors injected in front of the in-process client's API server (the socket the binary
    /// uses is not affected).
    pub kube_faults: crate::kube_faults::KubeFaults,
    /// Where in-process operators send GCP calls instead of the emulator (e.g. a proxy).
    pub gcp_endpoint: Option<String>,
    /// In-process operators watch `TpuPolicy` objects and run the usage report (policy status,
    /// budgets), as the binary does; off by default (the crash runs make no policy).
    pub tenancy: bool,
    server: Option<kube_emulator::Server>,
    op: Option<InProcess>,
    /// Set by `use_process`: operators are `tpu-operator run` processes, killed with SIGKILL.
    process: Option<ProcessMode>,
    proc: Option<crate::process::OperatorProcess>,
    /// Operator starts so far (the first start counts).
    pub starts: u32,
}

impl World {
    /// Both emulators, the gcp-emulator on a manual clock, the CRDs installed, inputs uploaded.
    pub async fn start() -> Self {
        Self::start_with(emulators::gcp_manual(start_time()).await).await
    }

    /// For an operator process (`use_process`): the binary's controllers use the wall clock,
    /// so the emulator's manual clock starts at the wall clock's now and only runs ahead of it
    /// (completion markers are then never older than the attempt that wrote them).
    pub async fn start_for_process() -> Self {
        Self::start_with(emulators::gcp_manual(Utc::now()).await).await
    }

    /// [`Self::start_for_process`] then [`Self::use_process`]: a world whose operator is the real
    /// binary of `build` (its kubeconfig in `dir`, `extra` flags for `tpu-operator run`).
    pub async fn start_process(
        dir: &std::path::Path,
        build: crate::process::OperatorBuild,
        extra: &[&str],
    ) -> Self {
        let mut world = Self::start_for_process().await;
        world.use_process(dir, build, extra).await;
        world
    }

    /// As `start`, with a gcp-emulator built by the caller (e.g. a scaled wall clock).
    pub async fn start_with(gcp: gcp_emulator::Emulator) -> Self {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        crate::init_logs();
        let kube = emulators::kube_with_crds().expect("install the project's CRDs");
        let kube_faults = crate::kube_faults::KubeFaults::default();
        let client = kube::Client::new(kube_faults.wrap(kube.router()), NAMESPACE);
        let world = Self {
            kube,
            client,
            gcp,
            polls: Polls::fast(),
            kube_faults,
            gcp_endpoint: None,
            tenancy: false,
            server: None,
            op: None,
            process: None,
            proc: None,
            starts: 0,
        };
        world.seed_inputs();
        world
    }

    /// Serves the kube-emulator on a loopback socket (for an operator process) and writes a
    /// kubeconfig for it into `dir`.
    pub async fn serve_kube(&mut self, dir: &std::path::Path) -> std::path::PathBuf {
        let server = self
            .kube
            .start("127.0.0.1:0")
            .await
            .expect("kube-emulator on a socket");
        let path = dir.join("kubeconfig");
        emulators::write_kubeconfig(&server, &path).expect("write kubeconfig");
        self.server = Some(server);
        path
    }

    /// From now on `start_operator` spawns the real binary (against the kube-emulator served on
    /// a socket) and `kill_operator` SIGKILLs it. `extra` are flags for `tpu-operator run`.
    pub async fn use_process(
        &mut self,
        dir: &std::path::Path,
        build: crate::process::OperatorBuild,
        extra: &[&str],
    ) {
        let kubeconfig = self.serve_kube(dir).await;
        self.process = Some(ProcessMode {
            bin: crate::process::operator_binary(build),
            kubeconfig,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        });
    }

    /// The running operator process, in process mode.
    pub fn process(&self) -> Option<&crate::process::OperatorProcess> {
        self.proc.as_ref()
    }

    pub fn seed_inputs(&self) {
        self.gcp.put_object(BUCKET, RAW_OBJECT, "hello", "text/plain");
        self.gcp
            .put_object(BUCKET, "scripts/preprocess.py", "print(1)", "text/x-python");
        self.gcp
            .put_object(BUCKET, "scripts/tokenize.py", "print(1)", "text/x-python");
    }

    /// A fresh controller context, as a new operator process builds it.
    pub async fn context(&self) -> Context {
        let spec = ContextSpec {
            cluster_id: "reliability".into(),
            default_project: "demo-project".into(),
            namespace: Some(NAMESPACE.into()),
            concurrency: 8,
            polls: self.polls.clone(),
            tenancy: self
                .tenancy
                .then_some(tpu_operator_controller::governance::tenancy::WithoutPolicy::Allow),
        };
        let url = self.gcp_endpoint.clone().unwrap_or_else(|| self.gcp.url());
        spec.build_via(&self.client, &self.gcp, &url)
            .await
            .expect("controller context")
    }

    /// Starts the three controllers in-process on a fresh context.
    pub async fn start_operator(&mut self) {
        if let Some(mode) = &self.process {
            assert!(self.proc.is_none(), "an operator is already running");
            let extra: Vec<&str> = mode.extra.iter().map(String::as_str).collect();
            let p =
                crate::process::OperatorProcess::spawn(&mode.bin, &mode.kubeconfig, &self.gcp.url(), &extra);
            assert!(
                p.wait_ready(Duration::from_secs(60)).await,
                "tpu-operator run never became ready"
            );
            self.proc = Some(p);
            self.starts += 1;
            return;
        }
        self.start_operator_with(self.context().await).await;
    }

    /// Starts the three controllers on a context the caller prepared (e.g. with a wrapped GCP
    /// client).
    pub async fn start_operator_with(&mut self, ctx: Context) {
        assert!(self.op.is_none(), "an operator is already running");
        let ctx = Arc::new(ctx);
        let tasks = vec![
            tokio::spawn(tpu_slice::run(ctx.clone(), never_shutdown())),
            tokio::spawn(preprocess_batch::run(ctx.clone(), never_shutdown())),
            tokio::spawn(training_pipeline::run(ctx.clone(), never_shutdown())),
        ];
        let tasks = if self.tenancy {
            let report = tpu_operator_controller::governance::tenancy::report::run(
                ctx.tenancy.clone(),
                ctx.clock.clone(),
                ctx.config.clone(),
                never_shutdown(),
            );
            tasks.into_iter().chain([tokio::spawn(report)]).collect()
        } else {
            tasks
        };
        self.op = Some(InProcess { tasks, ctx });
        self.starts += 1;
    }

    /// Controllers of the in-process operator whose task ended on its own (they should run
    /// until killed): 0 = TpuSlice, 1 = PreprocessBatch, 2 = TrainingPipeline.
    pub fn ended_controllers(&self) -> Vec<usize> {
        self.op
            .as_ref()
            .map(|op| (0..3).filter(|&i| op.tasks[i].is_finished()).collect())
            .unwrap_or_default()
    }

    /// The running operator's reconcile count (all kinds).
    pub fn reconciles(&self) -> Option<u64> {
        let op = self.op.as_ref()?;
        // A family of counters keyed by kind; read the three we know.
        let m = &op.ctx.metrics;
        Some(
            ["TpuSlice", "PreprocessBatch", "TrainingPipeline"]
                .iter()
                .map(|kind| {
                    m.reconciles
                        .get_or_create(&tpu_operator_controller::runtime::metrics::KindLabels { kind })
                        .get()
                })
                .sum(),
        )
    }

    /// Kills the operator the way SIGKILL does: the tasks stop at their next await point and
    /// nothing of theirs runs afterwards.
    pub async fn kill_operator(&mut self) {
        if let Some(p) = self.proc.take() {
            p.sigkill();
        }
        if let Some(op) = self.op.take() {
            for t in &op.tasks {
                t.abort();
            }
            for t in op.tasks {
                let _ = t.await;
            }
        }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    /// Creates an object in the world's namespace and returns what the server stored.
    pub async fn create<K: NamespacedObject>(&self, obj: &K) -> K {
        // Retries injected conflicts and server errors, as `delete` does: the fault suites make
        // the API server refuse a share of all writes, the bench's own creates included. An
        // object that already exists (409 `AlreadyExists`) is a failure of the test, not a retry.
        let mut obj = obj.clone();
        obj.meta_mut().namespace = Some(NAMESPACE.to_owned());
        let name = obj.meta().name.clone();
        for _ in 0..50 {
            match self.api::<K>().create(&PostParams::default(), &obj).await {
                Ok(stored) => return stored,
                Err(kube::Error::Api(e)) if (e.code == 409 && e.reason == "Conflict") || e.code >= 500 => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("create {name:?}: {e}"),
            }
        }
        panic!("create {name:?}: still refused after 50 tries");
    }

    /// Deletes an object (ignoring NotFound).
    pub async fn delete<K: NamespacedObject>(&self, name: &str) {
        // Retries conflicts and server errors (the fault suites inject them).
        for _ in 0..50 {
            match self.api::<K>().delete(name, &DeleteParams::default()).await {
                Ok(_) => return,
                Err(kube::Error::Api(e)) if e.code == 404 => return,
                Err(kube::Error::Api(e)) if e.code == 409 || e.code >= 500 => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("delete {name}: {e}"),
            }
        }
        panic!("delete {name}: still refused after 50 tries");
    }

    /// All objects of the three kinds.
    pub async fn snapshot(&self) -> Snapshot {
        let lp = ListParams::default();
        Snapshot {
            slices: self.api::<TpuSlice>().list(&lp).await.expect("list").items,
            batches: self.api::<PreprocessBatch>().list(&lp).await.expect("list").items,
            pipelines: self
                .api::<TrainingPipeline>()
                .list(&lp)
                .await
                .expect("list")
                .items,
        }
    }

    /// Advances the cloud clock by `step` every few milliseconds until `done` holds for a
    /// snapshot (`Ok`) or `limit` of real time passes (`Err` with the last snapshot).
    pub async fn drive(
        &self,
        limit: Duration,
        step: Duration,
        mut done: impl FnMut(&Snapshot) -> bool,
    ) -> Result<Snapshot, Snapshot> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let snap = self.snapshot().await;
            if done(&snap) {
                return Ok(snap);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(snap);
            }
            self.advance(step);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// `n` ticks of 15 s cloud time, 10 ms real time each.
    pub async fn idle_ticks(&self, n: u32) {
        for _ in 0..n {
            self.advance(Duration::from_secs(15));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Sum of all GCP calls the emulator answered so far.
    pub fn gcp_calls(&self) -> u64 {
        self.gcp.call_counts().values().sum()
    }

    /// Advances the emulator clock.
    pub fn advance(&self, d: Duration) {
        self.gcp.clock().advance(d);
    }
}

#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub slices: Vec<TpuSlice>,
    pub batches: Vec<PreprocessBatch>,
    pub pipelines: Vec<TrainingPipeline>,
}

impl Snapshot {
    pub fn is_empty(&self) -> bool {
        self.slices.is_empty() && self.batches.is_empty() && self.pipelines.is_empty()
    }

    pub fn len(&self) -> usize {
        self.slices.len() + self.batches.len() + self.pipelines.len()
    }
}
