//! The chart's RBAC, proven the way the operator runs: on a real kube-apiserver with RBAC
//! (CI's control plane, `TPU_OPERATOR_KUBE=real`), the chart installed by real helm, and
//! `tpu-operator run` started as the chart's ServiceAccount: a token from the TokenRequest API in a
//! kubeconfig of its own, no admin credentials anywhere in the operator's path. The config file is
//! the one the chart rendered into its ConfigMap (read back from the cluster), so the chart's
//! values reach the binary as they do in a pod; only the addresses the pod would get from the
//! cluster (metrics port, gcp-emulator URL, pod name) are flags.
//!
//! For each scope (`Namespace`, then `Cluster`) it drives: the quickstart pipeline to Succeeded
//! and its deletion (every cloud resource gone), a tenancy refusal (PolicyDenied status and Event),
//! the orphan sweeper (the zone from `config.orphanZones`, its report ConfigMap created from
//! nothing and its OrphanFound Event, under the cluster id derived from the kube-system Namespace),
//! the leader's capacity view ConfigMap (created from nothing)
//! and leader election with two processes (the leader is killed; the standby takes over and
//! reconciles). Any `forbidden` / 403 in an operator's log fails the suite.
//!
//! kube-emulator has no RBAC, so against it (the default `cargo test`) the suite says so and
//! returns; scripts/ci-control-plane.sh runs it against the real server.

mod support;

#[path = "rbac/kueue.rs"]
mod kueue;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{ConfigMap, Namespace},
    events::v1::Event,
};
use kube::{
    Api,
    api::{DeleteParams, DynamicObject, ListParams, PostParams},
    discovery::ApiResource,
};
use support::{chart_dir, repo_root};
use tpu_operator_api::{
    TpuSlice, TrainingPipeline,
    naming::{ObjectIdentity, identity_labels},
};

const BIN: &str = env!("CARGO_BIN_EXE_tpu-operator");
const PROJECT: &str = "demo-project";
/// Where the sweeper is told to look (`config.orphanZones`); the tenant may also use it.
const SWEEP_ZONE: &str = "us-central2-b";
/// How long any one wait may take: the real control plane shares two cores with the rest of CI.
const WAIT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_rbac_suffices_for_every_flow_as_the_service_account() {
    let kubeconfig = match test_kit::target().expect("TPU_OPERATOR_KUBE / KUBECONFIG") {
        test_kit::Target::Real { kubeconfig } => kubeconfig,
        test_kit::Target::Emulator => {
            eprintln!(
                "NOTICE: chart RBAC suite needs a real kube-apiserver with RBAC (kube-emulator has none); \
                 scripts/ci-control-plane.sh runs it with TPU_OPERATOR_KUBE=real"
            );
            return;
        }
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let admin = test_kit::real_client(&kubeconfig).await.expect("admin client");
    let helm_version = run(Command::new(test_tools::helm()).args(["version", "--short"]));
    println!("rbac: helm {}", helm_version.trim());
    let gcp = gcp_emulator::Emulator::builder()
        .time_scale(600.0)
        .start()
        .await
        .expect("gcp-emulator");
    // Both scopes in one test, one after the other: a cluster-scoped operator would otherwise
    // reconcile the namespaced phase's objects too.
    for scope in ["Namespace", "Cluster"] {
        let install = Install::new(&kubeconfig, &admin, scope, false).await;
        install.drive(&admin, &gcp).await;
    }
}

/// One `helm install` of the chart and what the operator needs to run as its ServiceAccount.
struct Install {
    scope: &'static str,
    release: String,
    /// The release namespace (ServiceAccount, ConfigMaps, Lease, orphan report).
    namespace: String,
    /// Where the tenant's objects go (the watched namespace in `Namespace` scope).
    tenant: String,
    admin_kubeconfig: PathBuf,
    dir: tempfile::TempDir,
    /// `tpu-operator run --config` as the chart rendered it.
    config: PathBuf,
    /// Kubeconfig with the ServiceAccount's token and nothing else.
    sa_kubeconfig: PathBuf,
}

impl Install {
    /// `kueue`: the chart's `kueue.enabled` (Kueue must be installed: the operator checks its CRD
    /// at start).
    async fn new(admin_kubeconfig: &Path, admin: &kube::Client, scope: &'static str, kueue: bool) -> Self {
        let suffix = format!("{:08x}", rand_suffix());
        let lower = scope.to_lowercase();
        let release = format!("rbac-{lower}-{suffix}");
        let namespace = format!("tpuop-rbac-{lower}-{suffix}");
        let tenant = format!("tpuop-tenant-{lower}-{suffix}");
        let dir = tempfile::tempdir().unwrap();
        let helm = |args: &[&str]| run(helm_command(dir.path(), admin_kubeconfig).args(args));
        create_namespace(admin, &tenant).await;
        let values = serde_json::json!({
            "scope": scope,
            "watchNamespace": if scope == "Namespace" { tenant.as_str() } else { "" },
            "config": {
                "project": PROJECT,
                "orphanZones": [SWEEP_ZONE],
                "orphanRegions": ["us-east5"],
                "orphanSweepInterval": "2s",
                "pollActive": "200ms",
                "pollStable": "2s",
                "pollCapacity": "500ms",
                "leaseDuration": "3s",
                "logFormat": "json",
            },
            "kueue": {"enabled": kueue},
            // Required (no image is published); never pulled: the control plane runs no kubelet.
            "image": {"repository": "registry.example/tpu-operator"},
        });
        let values_file = dir.path().join("values.json");
        std::fs::write(&values_file, values.to_string()).unwrap();
        helm(&[
            "install",
            &release,
            chart_dir().to_str().unwrap(),
            "--namespace",
            &namespace,
            "--create-namespace",
            "--values",
            values_file.to_str().unwrap(),
        ]);
        println!("rbac[{scope}]: helm install {release} -n {namespace} (watching {tenant})");
        // The tenant's policy, as a cluster administrator writes it (europe-west1-b is an allowed
        // zone in a region that is not: only the controller sees that).
        let policy: tpu_operator_api::TpuPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuPolicy",
            "metadata": {"name": release},
            "spec": {
                "namespaces": [tenant],
                "allowedZones": [SWEEP_ZONE, "europe-west4-b", "europe-west1-b"],
                "allowedRegions": ["us-east5", "europe-west4"],
                "allowedBuckets": ["demo-project-tpu-data"],
                "maxChips": 64,
                // Far above what the suite spends: metered and shown, never refusing.
                "budgets": [{"period": "Month", "limitUsd": 1000000.0}],
            }
        }))
        .unwrap();
        Api::<tpu_operator_api::TpuPolicy>::all(admin.clone())
            .create(&PostParams::default(), &policy)
            .await
            .expect("create the tenant's TpuPolicy");

        // The config file exactly as the Deployment mounts it.
        let fullname = format!("{release}-tpu-operator");
        let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &namespace);
        let cm = cms.get(&fullname).await.expect("the chart's ConfigMap");
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, &cm.data.unwrap()["config.yaml"]).unwrap();

        // A token for the chart's ServiceAccount from the TokenRequest API.
        let token = run(Command::new(test_tools::kubectl())
            .arg("--kubeconfig")
            .arg(admin_kubeconfig)
            .args(["create", "token", &fullname, "-n", &namespace, "--duration=2h"]));
        let sa_kubeconfig = dir.path().join("sa.kubeconfig");
        std::fs::write(
            &sa_kubeconfig,
            test_kit::identity::token_kubeconfig(admin_kubeconfig, token.trim()),
        )
        .unwrap();
        let who = run(Command::new(test_tools::kubectl())
            .arg("--kubeconfig")
            .arg(&sa_kubeconfig)
            .args(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]));
        assert_eq!(who, format!("system:serviceaccount:{namespace}:{fullname}"));
        println!("rbac[{scope}]: operator identity {who}");
        Self {
            scope,
            release,
            namespace,
            tenant,
            admin_kubeconfig: admin_kubeconfig.to_owned(),
            dir,
            config,
            sa_kubeconfig,
        }
    }

    /// A `tpu-operator run` replica as the Deployment starts it (args `run --config`, env
    /// POD_NAME / POD_NAMESPACE), authenticated as the ServiceAccount.
    fn replica(&self, name: &str, gcp: &gcp_emulator::Emulator) -> Replica {
        let metrics = free_port();
        let log = self.dir.path().join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(&self.config)
            .arg("--kubeconfig")
            .arg(&self.sa_kubeconfig)
            .args(["--gcp-emulator", &gcp.url()])
            .args(["--metrics-addr", &metrics.to_string()])
            .env("POD_NAME", name)
            .env("POD_NAMESPACE", &self.namespace)
            .env("RUST_LOG", "info")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn tpu-operator run");
        Replica {
            name: name.to_owned(),
            child,
            metrics: format!("http://{metrics}/metrics"),
            log,
        }
    }

    async fn drive(&self, admin: &kube::Client, gcp: &gcp_emulator::Emulator) {
        let scope = self.scope;
        let mut replicas = [
            self.replica(&format!("{}-a", self.release), gcp),
            self.replica(&format!("{}-b", self.release), gcp),
        ];
        let leader = wait_leader(admin, &self.namespace, &replicas).await;
        println!("rbac[{scope}]: two replicas, {leader} holds the Lease");
        self.quickstart_succeeds_and_leaves_nothing(admin, gcp, &replicas)
            .await;
        let slices: Api<TpuSlice> = Api::namespaced(admin.clone(), &self.tenant);
        self.tenancy_refuses_at_apply_and_in_the_controller(admin, &slices)
            .await;
        self.a_tenant_cannot_strip_the_finalizer(admin, gcp, &slices)
            .await;
        self.a_view_user_reads_its_budget(admin).await;
        self.orphan_sweeper_reports(admin, gcp).await;
        self.standby_takes_over(admin, gcp, &mut replicas, &leader, &slices)
            .await;
        no_forbidden_requests(scope, &mut replicas);
    }

    /// The quickstart to Succeeded, then its deletion leaves nothing in the cloud.
    async fn quickstart_succeeds_and_leaves_nothing(
        &self,
        admin: &kube::Client,
        gcp: &gcp_emulator::Emulator,
        replicas: &[Replica],
    ) {
        let scope = self.scope;
        let pipeline = self.create_example(admin, "quickstart.yaml", "quickstart").await;
        let tpl: Api<TrainingPipeline> = Api::namespaced(admin.clone(), &self.tenant);
        let done = wait(&format!("{pipeline} Succeeded"), async || {
            let p = tpl.get(&pipeline).await.ok()?;
            let phase = serde_json::to_value(p.status.as_ref()?.phase).ok()?;
            (phase == "Succeeded").then_some(p)
        })
        .await;
        println!(
            "rbac[{scope}]: TrainingPipeline/{pipeline} Succeeded (generation {:?})",
            done.metadata.generation
        );
        tpl.delete(&pipeline, &DeleteParams::default()).await.unwrap();
        wait(&format!("{pipeline} deleted"), async || {
            tpl.get_opt(&pipeline).await.unwrap().is_none().then_some(())
        })
        .await;
        wait_cloud_empty(gcp, replicas).await;
        println!("rbac[{scope}]: TrainingPipeline/{pipeline} deleted; cloud resources left: 0");
    }

    /// Tenancy. At apply: the chart's ValidatingAdmissionPolicy refuses a zone the policy does
    /// not list (the API server loads a new policy within moments; anything it admitted before
    /// is deleted and tried again).
    async fn tenancy_refuses_at_apply_and_in_the_controller(
        &self,
        admin: &kube::Client,
        slices: &Api<TpuSlice>,
    ) {
        let scope = self.scope;
        let message = wait(
            "the chart's admission policy refusing a forbidden zone",
            async || {
                let mut obj = example("spot-queued-slice.yaml");
                obj.metadata.name = Some("forbidden-zone".into());
                obj.data["spec"]["zone"] = "asia-east1-a".into();
                match self.try_create(admin, obj).await {
                    Err(kube::Error::Api(e)) if e.code == 403 => Some(e.message),
                    Err(e) => panic!("unexpected error creating the forbidden slice: {e}"),
                    Ok(name) => {
                        slices.delete(&name, &DeleteParams::default()).await.unwrap();
                        None
                    }
                }
            },
        )
        .await;
        assert!(
            message.contains("ValidatingAdmissionPolicy")
                && message.contains(&format!(
                    "denied by TpuPolicy {}, spec.allowedZones:",
                    self.release
                )),
            "{message}"
        );
        println!("rbac[{scope}]: refused at apply by the chart's ValidatingAdmissionPolicy: {message}");
        // By the controller: the zone is allowed, its region is not (PolicyDenied, Event).
        let refused = self
            .create_slice(admin, "refused", "europe-west1-b", "spot-queued-slice.yaml")
            .await;
        wait("PolicyDenied on the refused slice", async || {
            let s = slices.get(&refused).await.ok()?;
            s.status?
                .conditions
                .iter()
                .any(|c| c.reason == "PolicyDenied" && c.message.contains("allowedRegions"))
                .then_some(())
        })
        .await;
        wait_event(admin, &self.tenant, &refused, "PolicyDenied").await;
        println!("rbac[{scope}]: TpuSlice/{refused} refused: PolicyDenied condition and Event");
        // The operator's ServiceAccount writes the policy's live usage.
        let policies: Api<tpu_operator_api::TpuPolicy> = Api::all(admin.clone());
        let status = wait("the TpuPolicy's status from the operator", async || {
            let st = policies.get(&self.release).await.ok()?.status?;
            (st.selected_namespaces == 1 && st.refused == 1).then_some(st)
        })
        .await;
        println!(
            "rbac[{scope}]: TpuPolicy/{} status: {} namespace, {} chips, {} refused",
            self.release, status.selected_namespaces, status.chips, status.refused
        );
        slices.delete(&refused, &DeleteParams::default()).await.unwrap();
    }

    /// A user with the namespace's `view` role reads its budget (spent, left, next action) from
    /// the view the operator's ServiceAccount writes there, without any grant on TpuPolicy.
    async fn a_view_user_reads_its_budget(&self, admin: &kube::Client) {
        let scope = self.scope;
        let ns = self.tenant.as_str();
        test_kit::identity::bind_role(admin, ns, "budget-viewer", "view").await;
        let token =
            test_kit::identity::service_account_token(admin, ns, "budget-viewer", Duration::from_secs(3600))
                .await;
        let viewer = test_kit::identity::token_client(&self.admin_kubeconfig, &token).await;
        test_kit::identity::wait_allowed(&viewer, Some(ns), "", "configmaps", "get").await;
        let views: Api<ConfigMap> = Api::namespaced(viewer, ns);
        let key = format!("{}.Month", self.release);
        let line = wait("the namespace's budget view, read as a view user", async || {
            let cm = views
                .get(tpu_operator_controller::governance::tenancy::budget_view::CONFIGMAP)
                .await
                .ok()?;
            cm.data?.remove(&key)
        })
        .await;
        assert!(
            line.starts_with("spent $")
                && line.contains(" left; in force: nothing; next: RefuseNewWork at $1000000.00 (100 %)"),
            "{line}"
        );
        println!("rbac[{scope}]: a view user of {ns} reads its budget: {line}");
    }

    /// Issue 32, attack 4: a tenant with the aggregated `edit` role removes the finalizer of a
    /// running slice, to delete it before the operator re-adds it and keep its node running out of
    /// the quota. The chart's finalizer guard refuses the removal (only the operator's
    /// ServiceAccount and administrators may); the tenant's delete then goes through the cleanup.
    async fn a_tenant_cannot_strip_the_finalizer(
        &self,
        admin: &kube::Client,
        gcp: &gcp_emulator::Emulator,
        slices: &Api<TpuSlice>,
    ) {
        let scope = self.scope;
        // The tenant as the e2e suites' `Tenant` is (test_kit::identity): a ServiceAccount bound
        // to `edit` in the namespace, authenticated by a TokenRequest token and nothing else.
        let ns = self.tenant.as_str();
        test_kit::identity::bind_edit(admin, ns, "tenant-user").await;
        let token =
            test_kit::identity::service_account_token(admin, ns, "tenant-user", Duration::from_secs(3600))
                .await;
        let tenant = test_kit::identity::token_client(&self.admin_kubeconfig, &token).await;
        let as_tenant: Api<TpuSlice> = Api::namespaced(tenant, ns);

        let before: BTreeSet<String> = gcp.billable_resources().into_iter().map(|r| r.name).collect();
        let name = self
            .create_slice(admin, "stripped", SWEEP_ZONE, "spot-queued-slice.yaml")
            .await;
        wait("the operator's finalizer on the slice", async || {
            let s = slices.get(&name).await.ok()?;
            kube::ResourceExt::finalizers(&s)
                .iter()
                .any(|f| f == tpu_operator_api::FINALIZER)
                .then_some(())
        })
        .await;
        let strip = serde_json::json!({"metadata": {"finalizers": null}});
        // The tenant may patch its slice once the controller-manager has aggregated the chart's
        // rules into `edit`; until then RBAC refuses, which says nothing about the guard.
        let refused = wait(
            "the tenant's finalizer removal answered by admission",
            async || {
                let patch = kube::api::Patch::Merge(&strip);
                match as_tenant
                    .patch(&name, &kube::api::PatchParams::default(), &patch)
                    .await
                {
                    Err(kube::Error::Api(e)) if e.message.contains("cannot patch resource") => None,
                    other => Some(other),
                }
            },
        )
        .await;
        match refused {
            Err(kube::Error::Api(e))
                if e.code == 403 && e.message.contains("only tpu-operator removes its finalizer") =>
            {
                println!(
                    "rbac[{scope}]: the tenant's finalizer removal refused: {}",
                    e.message
                );
            }
            other => panic!("a tenant removed the operator's finalizer: {other:?}"),
        }
        as_tenant
            .delete(&name, &DeleteParams::default())
            .await
            .expect("the tenant deletes its slice");
        wait("the stripped slice deleted through the operator", async || {
            slices.get_opt(&name).await.ok()?.is_none().then_some(())
        })
        .await;
        let left: Vec<_> = gcp
            .billable_resources()
            .into_iter()
            .filter(|r| !before.contains(&r.name))
            .collect();
        assert!(
            left.is_empty(),
            "the slice's cloud resources outlived it: {left:?}"
        );
        println!("rbac[{scope}]: TpuSlice/{name} deleted by the tenant went through the cleanup");
    }

    /// The orphan sweeper: a node of this cluster whose owner is gone, in the zone the
    /// chart's orphanZones names, under the cluster id read from kube-system.
    async fn orphan_sweeper_reports(&self, admin: &kube::Client, gcp: &gcp_emulator::Emulator) {
        let scope = self.scope;
        let cluster_id = kube_system_uid(admin).await;
        let orphan = format!("orphan-{}", self.release);
        create_orphan_node(gcp, &orphan, &self.tenant, &cluster_id).await;
        let report: Api<ConfigMap> = Api::namespaced(admin.clone(), &self.namespace);
        let data = wait("the orphan report ConfigMap", async || {
            let cm = report.get_opt("tpu-operator-orphans").await.ok()??;
            let data = cm.data?;
            data.get("orphans")?.contains(&orphan).then_some(data)
        })
        .await;
        wait_event(admin, &self.namespace, "tpu-operator-orphans", "OrphanFound").await;
        // The leader's capacity view: created from nothing by server-side apply as the
        // ServiceAccount (the leader writes it at once on taking the lease).
        wait("the capacity view ConfigMap", async || {
            report
                .get_opt("tpu-operator-capacity")
                .await
                .ok()??
                .data?
                .get("snapshot.json")
                .cloned()
        })
        .await;
        println!(
            "rbac[{scope}]: orphan sweeper (cluster id = kube-system UID {cluster_id}) reported {orphan} in {SWEEP_ZONE}: ConfigMap tpu-operator-orphans ({} keys) and an OrphanFound Event",
            data.len()
        );
        delete_node(gcp, &orphan).await;
    }

    /// Leader election: kill the leader; the standby takes over and reconciles.
    async fn standby_takes_over(
        &self,
        admin: &kube::Client,
        gcp: &gcp_emulator::Emulator,
        replicas: &mut [Replica; 2],
        leader: &str,
        slices: &Api<TpuSlice>,
    ) {
        let scope = self.scope;
        let leader_index = replicas.iter().position(|r| r.name == leader).unwrap();
        replicas[leader_index].kill();
        let next = wait_leader(admin, &self.namespace, &replicas[1 - leader_index..][..1]).await;
        let after = self
            .create_slice(
                admin,
                "after-failover",
                "europe-west4-b",
                "spot-queued-slice.yaml",
            )
            .await;
        let started = Instant::now();
        loop {
            let s = slices.get(&after).await.unwrap();
            let status = s.status.clone().unwrap_or_default();
            if status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
            {
                break;
            }
            assert!(
                started.elapsed() < WAIT,
                "{after} not Ready {WAIT:?} after the failover: {status:#?}\ncloud: {:#?}",
                gcp.list_resources()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        slices.delete(&after, &DeleteParams::default()).await.unwrap();
        wait(&format!("{after} deleted"), async || {
            slices.get_opt(&after).await.unwrap().is_none().then_some(())
        })
        .await;
        wait_cloud_empty(gcp, replicas.as_slice()).await;
        println!(
            "rbac[{scope}]: killed {leader}; {next} took the Lease and reconciled TpuSlice/{after} to Ready and deletion"
        );
    }

    /// Creates an example manifest's first object in the tenant namespace under `name`.
    async fn create_example(&self, admin: &kube::Client, file: &str, name: &str) -> String {
        let mut obj = example(file);
        obj.metadata.name = Some(name.into());
        self.create(admin, obj).await
    }

    async fn create_slice(&self, admin: &kube::Client, name: &str, zone: &str, file: &str) -> String {
        let mut obj = example(file);
        obj.metadata.name = Some(name.into());
        obj.data["spec"]["zone"] = zone.into();
        self.create(admin, obj).await
    }

    async fn create(&self, admin: &kube::Client, obj: DynamicObject) -> String {
        let kind = obj.types.clone().unwrap().kind;
        self.try_create(admin, obj)
            .await
            .unwrap_or_else(|e| panic!("create {kind}: {e}"))
    }

    async fn try_create(&self, admin: &kube::Client, mut obj: DynamicObject) -> Result<String, kube::Error> {
        obj.metadata.namespace = Some(self.tenant.clone());
        let types = obj.types.clone().unwrap();
        let (group, version) = types.api_version.split_once('/').unwrap();
        let resource = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: types.api_version.clone(),
            kind: types.kind.clone(),
            plural: format!("{}s", types.kind.to_lowercase()),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &self.tenant, &resource);
        api.create(&PostParams::default(), &obj).await?;
        Ok(obj.metadata.name.unwrap())
    }
}

/// `helm uninstall` and both namespaces deleted, also when the suite fails half-way: a
/// cluster-scoped operator of a later run would otherwise reconcile what this one left.
impl Drop for Install {
    fn drop(&mut self) {
        let _ = helm_command(self.dir.path(), &self.admin_kubeconfig)
            .args(["uninstall", &self.release, "--namespace", &self.namespace])
            .output();
        let _ = Command::new(test_tools::kubectl())
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .args([
                "delete",
                "namespace",
                &self.namespace,
                &self.tenant,
                "--wait=false",
            ])
            .output();
        let _ = Command::new(test_tools::kubectl())
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .args(["delete", "tpupolicy", &self.release, "--wait=false"])
            .output();
    }
}

struct Replica {
    name: String,
    child: Child,
    metrics: String,
    log: PathBuf,
}

impl Replica {
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "--- last lines of {}'s log ({}) ---\n{}",
                self.name,
                self.log.display(),
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }
}

/// Waits until one of `replicas` holds the Lease (the chart's `leaseName`) and says so in its
/// metrics; returns its name.
async fn wait_leader(admin: &kube::Client, namespace: &str, replicas: &[Replica]) -> String {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), namespace);
    wait("a leader among the replicas", async || {
        let holder = leases
            .get_opt("tpu-operator")
            .await
            .ok()??
            .spec?
            .holder_identity?;
        let replica = replicas.iter().find(|r| r.name == holder)?;
        let body = reqwest::get(&replica.metrics).await.ok()?.text().await.ok()?;
        body.lines()
            .any(|l| l == "tpu_operator_leader 1")
            .then_some(holder)
    })
    .await
}

/// Waits for an events.k8s.io Event with `reason` about the object `name` in `namespace`.
async fn wait_event(admin: &kube::Client, namespace: &str, name: &str, reason: &str) {
    let events: Api<Event> = Api::namespaced(admin.clone(), namespace);
    wait(&format!("a {reason} Event about {name}"), async || {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
            .then_some(())
    })
    .await;
}

/// Waits until gcp-emulator holds no billable resource; on timeout names what is left and shows
/// the operators' last log lines.
async fn wait_cloud_empty(gcp: &gcp_emulator::Emulator, replicas: &[Replica]) {
    let started = Instant::now();
    while !gcp.billable_resources().is_empty() {
        if started.elapsed() > WAIT {
            let logs: Vec<String> = replicas
                .iter()
                .map(|r| {
                    let log = std::fs::read_to_string(&r.log).unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(40).collect();
                    format!(
                        "--- {} ---\n{}",
                        r.name,
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    )
                })
                .collect();
            panic!(
                "cloud resources left after {WAIT:?}: {:#?}\n{}",
                gcp.billable_resources(),
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            started.elapsed() < WAIT,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn create_namespace(admin: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    namespaces.create(&PostParams::default(), &ns).await.unwrap();
}

async fn kube_system_uid(admin: &kube::Client) -> String {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces.get("kube-system").await.unwrap().metadata.uid.unwrap()
}

/// A TPU node labelled as this cluster's, owned by an object in `namespace` that never existed
/// (in a watched namespace: a namespaced operator never claims other namespaces' resources).
async fn create_orphan_node(gcp: &gcp_emulator::Emulator, id: &str, namespace: &str, cluster_id: &str) {
    let owner = ObjectIdentity {
        namespace: namespace.into(),
        name: "gone".into(),
        uid: "0badc0de-0000-4000-8000-000000000000".into(),
    };
    let labels: BTreeMap<String, String> = identity_labels(&owner, cluster_id);
    let url = format!(
        "{}/tpu/v2/projects/{PROJECT}/locations/{SWEEP_ZONE}/nodes?nodeId={id}",
        gcp.url()
    );
    let body = serde_json::json!({
        "acceleratorType": "v6e-8",
        "runtimeVersion": "v2-alpha-tpuv6e",
        "labels": labels,
    });
    let resp = reqwest::Client::new()
        .post(&url)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(
        resp.status().is_success(),
        "create {url}: {}",
        resp.text().await.unwrap()
    );
    wait(&format!("node {id} created"), async || {
        gcp.nodes()
            .iter()
            .any(|n| {
                n["name"]
                    .as_str()
                    .is_some_and(|name| name.ends_with(&format!("/nodes/{id}")))
            })
            .then_some(())
    })
    .await;
}

async fn delete_node(gcp: &gcp_emulator::Emulator, id: &str) {
    let url = format!(
        "{}/tpu/v2/projects/{PROJECT}/locations/{SWEEP_ZONE}/nodes/{id}",
        gcp.url()
    );
    let resp = reqwest::Client::new().delete(&url).send().await.unwrap();
    assert!(
        resp.status().is_success(),
        "delete {url}: {}",
        resp.text().await.unwrap()
    );
    wait("the orphan node gone", async || {
        gcp.billable_resources().is_empty().then_some(())
    })
    .await;
}

/// The first object of examples/`file`.
fn example(file: &str) -> DynamicObject {
    let text = std::fs::read_to_string(repo_root().join("examples").join(file)).unwrap();
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("examples/{file}: {e}"))
}

/// helm against the admin kubeconfig, with its cache/config/data homes under `dir` (never `~`).
fn helm_command(dir: &Path, admin_kubeconfig: &Path) -> Command {
    let mut cmd = Command::new(test_tools::helm());
    cmd.arg("--kubeconfig")
        .arg(admin_kubeconfig)
        .env("HELM_CACHE_HOME", dir.join("helm/cache"))
        .env("HELM_CONFIG_HOME", dir.join("helm/config"))
        .env("HELM_DATA_HOME", dir.join("helm/data"));
    cmd
}

/// Runs a command that must succeed; returns its stdout.
fn run(cmd: &mut Command) -> String {
    let out = cmd.stdin(Stdio::null()).output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        ^ std::process::id()
}

/// Whether `line` has `403` as a number of its own: a timestamp such as `16:16:53.224036Z` or a
/// UID holds those digits without being a refusal.
fn mentions_403(line: &str) -> bool {
    line.split(|c: char| !c.is_ascii_digit()).any(|n| n == "403")
}

#[test]
fn a_403_is_told_from_digits_inside_a_timestamp() {
    assert!(mentions_403(r#"{"code":403,"reason":"Forbidden"}"#));
    assert!(mentions_403("HTTP 403 Forbidden"));
    assert!(!mentions_403("2026-11-24T16:16:53.224036Z"));
    assert!(!mentions_403("uid 0badc0de-4030-4000"));
}

/// Nothing the operators asked for was forbidden.
fn no_forbidden_requests(scope: &str, replicas: &mut [Replica]) {
    let mut lines = Vec::new();
    for r in replicas.iter_mut() {
        r.kill();
        let log = std::fs::read_to_string(&r.log).unwrap();
        lines.push(log.lines().count());
        let forbidden: Vec<&str> = log
            .lines()
            .filter(|l| l.to_lowercase().contains("forbidden") || mentions_403(l))
            .collect();
        assert!(
            forbidden.is_empty(),
            "{} was refused by RBAC ({scope} scope):\n{}",
            r.name,
            forbidden.join("\n")
        );
    }
    println!("rbac[{scope}]: 0 forbidden requests in the replicas' logs ({lines:?} lines)");
}
