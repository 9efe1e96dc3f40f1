//! Acting as a tenant instead of as the test's administrator (issue 47 item 6).
//!
//! On the real API server a [`Tenant`] is the ServiceAccount `tenant` of a namespace, bound there
//! to the default `edit` ClusterRole by a RoleBinding, with the chart's tenant-facing RBAC
//! installed: the aggregated ClusterRoles that add the three workload kinds to `edit` / `view`
//! and the `rbac.policyReaders` role and binding (TpuPolicy read), rendered by helm from
//! charts/tpu-operator, the YAML users get. Its client authenticates with a token from the
//! TokenRequest API (what `kubectl create token` asks for) and nothing else, as the chart's RBAC
//! suite (crates/operator/tests/rbac.rs) authenticates its ServiceAccounts; the helpers it uses
//! ([`token_kubeconfig`], [`bind_edit`], [`service_account_token`]) live here for both.
//!
//! kube-emulator has no RBAC: there the tenant is the admin client, [`Tenant::enforced`] is
//! false and [`Tenant::refused_by_rbac`] skips (and says so) instead of sending the request.

use std::{
    future::Future,
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::Duration,
};

use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec},
    core::v1::ServiceAccount,
    rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding},
};
use kube::{
    Api, Resource,
    api::{Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
    core::NamespaceResourceScope,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{NamespacedObject, TestCluster, objects};

/// The ServiceAccount a [`Tenant`] acts as, in its own namespace.
pub const TENANT_SERVICE_ACCOUNT: &str = "tenant";
/// The release the tenant roles are rendered as: it contains the chart's name, so the roles are
/// `tpu-operator-e2e-edit`, `-view`, `-policy-reader` (the RBAC suite's releases are `rbac-*`).
const RELEASE: &str = "tpu-operator-e2e";
const MANAGER: &str = "tpu-operator-e2e";
/// How long RBAC may take to allow the tenant: the controller-manager aggregates new roles into
/// `edit` and the authorizer's caches follow within seconds; generous for a loaded machine.
const RBAC_SETTLES: Duration = Duration::from_secs(120);

/// Who acts in a tenancy test: a namespace's `edit` ServiceAccount on the real API server, the
/// admin client on kube-emulator.
pub struct Tenant {
    /// Authenticated as [`Self::user`] (the admin client on kube-emulator).
    pub client: kube::Client,
    /// The namespace it is bound to (`edit`), where [`Self::api`] and [`Self::create`] act.
    pub ns: String,
    user: Option<String>,
}

impl Tenant {
    /// The tenant of `ns` on `cluster`. On the real server: the chart's tenant roles applied
    /// (rendered with `helm`, which is only asked for there), the ServiceAccount and its `edit`
    /// RoleBinding created, and a client with its token, returned once RBAC lets it create
    /// TpuSlices in `ns` and list TpuPolicies. On kube-emulator: the admin client, with a notice.
    pub async fn of(
        cluster: &TestCluster,
        admin: &kube::Client,
        ns: &str,
        helm: impl FnOnce() -> PathBuf,
    ) -> Self {
        if cluster.emulator_handle().is_some() {
            eprintln!(
                "NOTICE: kube-emulator has no RBAC: the tenant of {ns} acts with the admin client, \
                 identity is not enforced here (TPU_OPERATOR_KUBE=real plays it as an `edit` ServiceAccount)"
            );
            return Self {
                client: admin.clone(),
                ns: ns.to_owned(),
                user: None,
            };
        }
        install_tenant_roles(admin, tenant_roles(&helm())).await;
        bind_edit(admin, ns, TENANT_SERVICE_ACCOUNT).await;
        let token = service_account_token(admin, ns, TENANT_SERVICE_ACCOUNT, Duration::from_secs(3600)).await;
        let client = token_client(cluster.kubeconfig(), &token).await;
        wait_allowed(&client, Some(ns), "tpu-operator.dev", "tpuslices", "create").await;
        wait_allowed(&client, None, "tpu-operator.dev", "tpupolicies", "list").await;
        Self {
            client,
            ns: ns.to_owned(),
            user: Some(format!("system:serviceaccount:{ns}:{TENANT_SERVICE_ACCOUNT}")),
        }
    }

    /// The identity the API server sees (`system:serviceaccount:<ns>:tenant`); `None` on
    /// kube-emulator, where the tenant is the admin.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// Whether the API server enforces the tenant's identity (RBAC): the real server only.
    pub fn enforced(&self) -> bool {
        self.user.is_some()
    }

    /// The kind `K` in the tenant's namespace, as the tenant.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// The kind `K` in another namespace `ns`, as the tenant (RBAC refuses it there).
    pub fn api_in<K>(&self, ns: &str) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Creates `obj` in the tenant's namespace as the tenant; panics with the server's answer.
    pub async fn create<K: NamespacedObject>(&self, obj: &K) -> K {
        objects::create_in(&self.client, &self.ns, obj).await
    }

    /// Sends `request` (made with this tenant's client) where RBAC is enforced and asserts that
    /// RBAC refused it: 403 naming the tenant's identity. Returns the refusal's message. On
    /// kube-emulator the request is not sent (it would go through as the admin and change what the
    /// rest of the test sees): the skip is printed and `None` returned.
    pub async fn refused_by_rbac<T: std::fmt::Debug>(
        &self,
        what: &str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Option<String> {
        let Some(user) = &self.user else {
            eprintln!("NOTICE: not checked on kube-emulator (no RBAC): RBAC refuses the tenant {what}");
            return None;
        };
        match request.await {
            Err(kube::Error::Api(e))
                if e.code == 403 && e.message.contains(&format!("User \"{user}\" cannot")) =>
            {
                eprintln!("RBAC refused the tenant {what}: {}", e.message);
                Some(e.message)
            }
            other => panic!("RBAC did not refuse the tenant ({user}) {what}: {other:?}"),
        }
    }
}

/// A kubeconfig (JSON, which is YAML) for the cluster of `admin_kubeconfig` (its first cluster:
/// server and CA) that authenticates with `token` only.
pub fn token_kubeconfig(admin_kubeconfig: &Path, token: &str) -> String {
    let text = std::fs::read_to_string(admin_kubeconfig)
        .unwrap_or_else(|e| panic!("read the admin kubeconfig {admin_kubeconfig:?}: {e}"));
    let admin: Value = serde_yaml::from_str(&text).expect("the admin kubeconfig is YAML");
    let cluster = &admin["clusters"][0]["cluster"];
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
        "current-context": "sa",
    })
    .to_string()
}

/// A client of the cluster of `admin_kubeconfig` that authenticates with `token` only.
pub async fn token_client(admin_kubeconfig: &Path, token: &str) -> kube::Client {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let kubeconfig =
        Kubeconfig::from_yaml(&token_kubeconfig(admin_kubeconfig, token)).expect("the token kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a client configuration from the token kubeconfig");
    kube::Client::try_from(config).expect("a client with the token")
}

/// Creates the ServiceAccount `name` in `ns` and the RoleBinding `<name>-edit` there to the
/// default `edit` ClusterRole (server-side apply: idempotent).
pub async fn bind_edit(admin: &kube::Client, ns: &str, name: &str) {
    bind_role(admin, ns, name, "edit").await;
}

/// Creates the ServiceAccount `name` in `ns` and the RoleBinding `<name>-<role>` there to the
/// ClusterRole `role` (`edit`, `view`; server-side apply: idempotent).
pub async fn bind_role(admin: &kube::Client, ns: &str, name: &str, role: &str) {
    let params = PatchParams::apply(MANAGER).force();
    let sa: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": ns},
    }))
    .expect("ServiceAccount");
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .patch(name, &params, &Patch::Apply(&sa))
        .await
        .unwrap_or_else(|e| panic!("create the ServiceAccount {ns}/{name}: {e}"));
    let binding_name = format!("{name}-{role}");
    let binding: RoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": binding_name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
    }))
    .expect("RoleBinding");
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .patch(&binding_name, &params, &Patch::Apply(&binding))
        .await
        .unwrap_or_else(|e| panic!("bind {ns}/{name} to {role}: {e}"));
}

/// A token for the ServiceAccount `ns/name` from the TokenRequest API, valid for `ttl`.
pub async fn service_account_token(admin: &kube::Client, ns: &str, name: &str, ttl: Duration) -> String {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(ttl.as_secs() as i64),
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("a token for {ns}/{name}: {e}"))
        .status
        .and_then(|status| status.token)
        .unwrap_or_else(|| panic!("no token in the TokenRequest for {ns}/{name}"))
}

/// Polls a SelfSubjectAccessReview until `client` may `verb` `resource` of `group` (in `ns`, or
/// cluster-wide), for at most [`RBAC_SETTLES`].
pub async fn wait_allowed(client: &kube::Client, ns: Option<&str>, group: &str, resource: &str, verb: &str) {
    let reviews = Api::<SelfSubjectAccessReview>::all(client.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                verb: Some(verb.to_owned()),
                namespace: ns.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let deadline = tokio::time::Instant::now() + RBAC_SETTLES;
    loop {
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .unwrap_or_else(|e| panic!("SelfSubjectAccessReview {verb} {resource}: {e}"));
        if answer.status.is_some_and(|s| s.allowed) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "RBAC never allowed {verb} {group}/{resource} in {ns:?} within {RBAC_SETTLES:?}: are the chart's \
             aggregated roles in `edit` (clusterrole-aggregation-controller)?"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The chart's tenant-facing RBAC as `helm template` renders templates/rbac.yaml with its
/// defaults (plus the image it requires): the ClusterRoles labelled to aggregate into the
/// default `edit` / `admin` / `view` roles, and the `rbac.policyReaders` ClusterRole and its
/// ClusterRoleBinding (every authenticated user may read TpuPolicies). Rendered once a process.
pub fn tenant_roles(helm: &Path) -> &'static [Value] {
    static RENDERED: OnceLock<Vec<Value>> = OnceLock::new();
    RENDERED.get_or_init(|| {
        let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/tpu-operator");
        let home = tempfile::tempdir().expect("a home for helm");
        let out = Command::new(helm)
            .args(["template", RELEASE])
            .arg(&chart)
            .args([
                "--namespace",
                RELEASE,
                "--set",
                "image.repository=registry.example/tpu-operator",
                "--show-only",
                "templates/rbac.yaml",
            ])
            .env("HELM_CACHE_HOME", home.path().join("cache"))
            .env("HELM_CONFIG_HOME", home.path().join("config"))
            .env("HELM_DATA_HOME", home.path().join("data"))
            .output()
            .unwrap_or_else(|e| panic!("run {helm:?}: {e}"));
        assert!(
            out.status.success(),
            "helm template of the chart's RBAC failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).expect("helm's output is UTF-8");
        let reader = format!("{RELEASE}-policy-reader");
        let roles: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
            .map(|doc| Value::deserialize(doc).expect("a YAML document"))
            .filter(|doc| {
                let aggregated = doc["metadata"]["labels"].as_object().is_some_and(|labels| {
                    labels
                        .keys()
                        .any(|k| k.starts_with("rbac.authorization.k8s.io/aggregate-to-"))
                });
                aggregated || doc["metadata"]["name"] == reader.as_str()
            })
            .collect();
        let kinds: Vec<String> = roles
            .iter()
            .map(|r| format!("{}/{}", r["kind"], r["metadata"]["name"]))
            .collect();
        assert_eq!(
            roles.len(),
            4,
            "the chart's edit and view aggregations and the policy readers' role and binding: {kinds:?}"
        );
        roles
    })
}

/// Applies `roles` (from [`tenant_roles`]) by server-side apply: idempotent, so tests running at
/// once on one server may all apply them.
pub async fn install_tenant_roles(admin: &kube::Client, roles: &[Value]) {
    let params = PatchParams::apply(MANAGER).force();
    for doc in roles {
        let name = doc["metadata"]["name"].as_str().expect("a role's name");
        let applied = match doc["kind"].as_str() {
            Some("ClusterRole") => {
                let role: ClusterRole = serde_json::from_value(doc.clone()).expect("ClusterRole");
                Api::<ClusterRole>::all(admin.clone())
                    .patch(name, &params, &Patch::Apply(&role))
                    .await
                    .map(drop)
            }
            Some("ClusterRoleBinding") => {
                let binding: ClusterRoleBinding =
                    serde_json::from_value(doc.clone()).expect("ClusterRoleBinding");
                Api::<ClusterRoleBinding>::all(admin.clone())
                    .patch(name, &params, &Patch::Apply(&binding))
                    .await
                    .map(drop)
            }
            other => panic!("not a tenant role: {other:?} {name}"),
        };
        applied.unwrap_or_else(|e| panic!("apply the chart's {name}: {e}"));
    }
}
