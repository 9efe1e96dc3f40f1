//! The Helm chart (charts/tpu-operator) with the real helm 4: `lint --strict`, rendering in
//! cluster-wide and namespaced modes, the chart's CRDs equal to `crds/`, bad values rejected by
//! values.schema.json, every rendered built-in object valid against the Kubernetes API types, the
//! RBAC the controllers need (and nothing more), and the generated files (deploy/, the chart README,
//! the argocd-cm snippet) current. `tests/chart_apply.rs` applies the rendering to kube-emulator.

mod support;

use std::collections::BTreeSet;

use serde_json::{Value, json};
use support::{ALL_OPTIONS, Helm, chart_dir, documents, find, generate, kinds, repo_root};

#[test]
fn helm_lint_strict_passes_with_defaults_and_with_every_option() {
    let helm = Helm::new();
    let chart = chart_dir();
    let chart = chart.to_str().unwrap();
    helm.ok(&["lint", "--strict", chart]);
    let mut args = vec!["lint", "--strict", chart];
    args.extend_from_slice(ALL_OPTIONS);
    helm.ok(&args);
    helm.ok(&[
        "lint",
        "--strict",
        chart,
        "--set",
        "scope=Namespace,watchNamespace=team-a",
    ]);
}

/// One source of truth for the CRD list: `tpu_operator_api::crds::all()` (what `tpu-operator crds`
/// prints). crds/, the chart's crds/, deploy/crds/*.yaml, deploy/crds/kustomization.yaml and what
/// each install path renders (helm, `kubectl kustomize` of deploy/ and deploy/staging) hold exactly
/// those CRDs: a fifth CRD forgotten in any one place fails here (a missing one left the Helm-free
/// install waiting forever for tpupolicies.tpu-operator.dev, issue 46).
#[test]
fn every_crd_list_is_the_generated_crds() {
    let root = repo_root();
    let generated: BTreeSet<String> = tpu_operator_api::crds::render_all()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let yaml_files = |dir: &std::path::Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
            .collect()
    };
    for dir in ["crds", "charts/tpu-operator/crds", "deploy/crds"] {
        assert_eq!(
            yaml_files(&root.join(dir)),
            generated,
            "{dir}/ must hold exactly the CRDs of `tpu-operator crds`: \
             cargo run -p tpu-operator -- crds --out crds/ && cp crds/*.yaml charts/tpu-operator/crds/ \
             && TPU_OPERATOR_BLESS=1 cargo test -p tpu-operator --test chart"
        );
        for name in &generated {
            assert!(
                std::fs::read(root.join("crds").join(name)).unwrap()
                    == std::fs::read(root.join(dir).join(name)).unwrap(),
                "{dir}/{name} differs from crds/{name}: cp crds/*.yaml {dir}/"
            );
        }
    }
    let kustomization: Value =
        serde_yaml::from_str(&std::fs::read_to_string(root.join("deploy/crds/kustomization.yaml")).unwrap())
            .unwrap();
    let listed: BTreeSet<String> = kustomization["resources"]
        .as_array()
        .expect("deploy/crds/kustomization.yaml lists resources")
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        listed, generated,
        "deploy/crds/kustomization.yaml must list every generated CRD: \
         TPU_OPERATOR_BLESS=1 cargo test -p tpu-operator --test chart"
    );
    // What each path applies, document by document.
    let generated_docs = documents(&tpu_operator_api::crds::render_stream());
    let crds_of = |yaml: &str| -> Vec<Value> {
        documents(yaml)
            .into_iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .collect()
    };
    let mut rendered = vec![(
        "helm template --include-crds".to_string(),
        crds_of(&Helm::new().template(&["--include-crds"])),
    )];
    for sub in ["", "staging", "crds"] {
        rendered.push((
            format!("kubectl kustomize deploy/{sub}"),
            crds_of(&support::kustomize_with_images(sub)),
        ));
    }
    for (how, crds) in rendered {
        assert_eq!(
            crds.len(),
            generated_docs.len(),
            "{how} renders {} CRDs, `tpu-operator crds` {}",
            crds.len(),
            generated_docs.len()
        );
        for crd in &generated_docs {
            // kustomize re-serializes (`minimum: 0.0` becomes `0`): compare numbers as numbers.
            let same = |c: &Value| as_f64(c.clone()) == as_f64(crd.clone());
            assert!(
                crds.iter().any(same),
                "{how} renders a different or no {}",
                crd["metadata"]["name"]
            );
        }
    }
}

/// No image is published (issue 46): `image.repository` has no default, and helm as the user runs
/// it (`template`, `install`; the Flux HelmRelease and Argo CD Application render the same
/// way) fails at once naming the value and how to build and set it; likewise
/// `gcpEmulator.image.repository` with the emulator on. With the value set, the Deployment uses it.
#[test]
fn the_image_is_required_and_the_error_says_how_to_build_and_set_it() {
    let helm = Helm::bare();
    let chart = chart_dir();
    let chart = chart.to_str().unwrap();
    let fails = |args: &[&str], value: &str, build: &str| {
        let out = helm.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "helm {args:?} succeeded without {value}");
        assert!(
            stderr.contains(&format!("{value} is required"))
                && stderr.contains("no ")
                && stderr.contains("image is published")
                && stderr.contains(build)
                && stderr.contains(&format!("{value}=REGISTRY/")),
            "helm {args:?}: {stderr}"
        );
    };
    let operator_build = "docker build -t REGISTRY/tpu-operator:TAG .";
    fails(&["template", "x", chart], "image.repository", operator_build);
    fails(
        &["install", "x", chart, "--dry-run=client"],
        "image.repository",
        operator_build,
    );
    fails(
        &[
            "template",
            "x",
            chart,
            "--set",
            "image.repository=registry.example/tpu-operator,gcpEmulator.enabled=true",
        ],
        "gcpEmulator.image.repository",
        "docker build --target gcp-emulator -t REGISTRY/gcp-emulator:TAG .",
    );
    // A stray space is refused by the schema (the API server would refuse the image anyway).
    let out = helm.run(&["template", "x", chart, "--set", "image.repository=a b"]);
    assert!(!out.status.success());
    let docs = documents(&helm.ok(&[
        "template",
        "x",
        chart,
        "--set",
        "image.repository=registry.example/tpu-operator,image.tag=1.2.3",
    ]));
    let deployment = find(&docs, "Deployment", Some("x-tpu-operator"));
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/tpu-operator:1.2.3"
    );
}

/// `v` with every number as an f64 (`0` and `0.0` compare equal).
fn as_f64(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, as_f64(v))).collect()),
        Value::Array(a) => Value::Array(a.into_iter().map(as_f64).collect()),
        Value::Number(n) => json!(n.as_f64().unwrap()),
        other => other,
    }
}

/// The finalizer guard lets exactly the operator's own ServiceAccount (and administrators) remove
/// the finalizer.
fn assert_finalizer_guard_exempts_only_the_operator(docs: &[Value]) {
    let guard = find(docs, "ValidatingAdmissionPolicy", Some("tpu-operator-finalizer"));
    let exempt = guard["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap();
    assert!(
        exempt.contains("'system:serviceaccount:tpu-operator:tpu-operator'")
            && exempt.contains("system:masters"),
        "{exempt}"
    );
}

#[test]
fn cluster_scope_renders_the_operator_with_cluster_roles() {
    let docs = documents(&Helm::new().template(&[
        "--set",
        "serviceAccount.gcpServiceAccount=op@my-proj.iam.gserviceaccount.com",
    ]));
    assert_eq!(
        kinds(&docs),
        [
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "PodDisruptionBudget",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "Service",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    assert_finalizer_guard_exempts_only_the_operator(&docs);
    let sa = find(&docs, "ServiceAccount", Some("tpu-operator"));
    assert_eq!(
        sa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"],
        "op@my-proj.iam.gserviceaccount.com"
    );

    let deploy = find(&docs, "Deployment", None);
    assert_eq!(deploy["spec"]["replicas"], 2);
    let pod = &deploy["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "tpu-operator");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let c = &pod["containers"][0];
    assert_eq!(
        c["args"],
        json!(["run", "--config", "/etc/tpu-operator/config.yaml"])
    );
    let sc = &c["securityContext"];
    assert_eq!(
        (
            &sc["allowPrivilegeEscalation"],
            &sc["readOnlyRootFilesystem"],
            &sc["capabilities"]["drop"]
        ),
        (&json!(false), &json!(true), &json!(["ALL"]))
    );
    let env: Vec<&str> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(env, ["POD_NAME", "POD_NAMESPACE", "RUST_LOG"]);
    assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name");
    assert_eq!(
        c["env"][1]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["ports"][0]["containerPort"], 8080);
    assert!(
        c["resources"]["requests"]["memory"].is_string() && c["resources"]["limits"]["memory"].is_string()
    );

    let config = operator_config(&docs);
    assert_eq!(config["metricsAddr"], "[::]:8080");
    assert_eq!(config["leaderElect"], true);
    assert!(
        config.get("namespace").is_none(),
        "cluster scope watches every namespace: {config}"
    );
    assert!(
        config.get("project").is_none(),
        "empty values are left out so the binary's defaults apply"
    );

    let role = find(&docs, "ClusterRole", Some("tpu-operator"));
    assert_eq!(rules(role), controller_rules());
    let binding = find(&docs, "ClusterRoleBinding", Some("tpu-operator"));
    assert_eq!(
        binding["subjects"][0],
        json!({"kind": "ServiceAccount", "name": "tpu-operator", "namespace": "tpu-operator"})
    );
    assert_crd_reader_and_lease_role(&docs, "tpu-operator");
}

#[test]
fn namespace_scope_renders_roles_in_the_watched_namespace_and_passes_it_to_the_binary() {
    let docs = documents(&Helm::new().template(&["--set", "scope=Namespace,watchNamespace=team-a"]));
    let role = find(&docs, "Role", Some("tpu-operator"));
    assert_eq!(role["metadata"]["namespace"], "team-a");
    assert_eq!(rules(role), controller_rules());
    let binding = find(&docs, "RoleBinding", Some("tpu-operator"));
    assert_eq!(binding["metadata"]["namespace"], "team-a");
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(
        binding["subjects"][0]["namespace"], "tpu-operator",
        "the operator runs in the release namespace"
    );
    assert_eq!(operator_config(&docs)["namespace"], "team-a");
    // The only cluster-scoped grants left to the operator are reading the four CRDs and the
    // kube-system Namespace by name, and the cluster-scoped TpuPolicy objects with the watched
    // namespace's labels (by name); the other ClusterRoles are for people (aggregated, readers).
    let bound: BTreeSet<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding")
        .map(|d| d["roleRef"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        bound,
        BTreeSet::from([
            "tpu-operator-crds",
            "tpu-operator-cluster-id",
            "tpu-operator-policies",
            "tpu-operator-policy-reader"
        ])
    );
    let policies = find(&docs, "ClusterRole", Some("tpu-operator-policies"));
    assert_eq!(
        policies["rules"][2]["resourceNames"],
        serde_json::json!(["team-a"]),
        "namespace scope reads only the watched namespace's labels"
    );
    let cluster_roles: BTreeSet<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole")
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        cluster_roles,
        BTreeSet::from([
            "tpu-operator-crds",
            "tpu-operator-cluster-id",
            "tpu-operator-policies",
            "tpu-operator-policy-reader",
            "tpu-operator-edit",
            "tpu-operator-view"
        ])
    );
    assert_crd_reader_and_lease_role(&docs, "tpu-operator");

    // Without watchNamespace, the release namespace is watched.
    let docs = documents(&Helm::new().template(&["--set", "scope=Namespace"]));
    assert_eq!(
        find(&docs, "Role", Some("tpu-operator"))["metadata"]["namespace"],
        "tpu-operator"
    );
    assert_eq!(operator_config(&docs)["namespace"], "tpu-operator");
}

#[test]
fn tenants_get_the_kinds_through_the_default_roles() {
    // Aggregated ClusterRoles: admin and edit get every verb on the three kinds and read-only
    // status; view gets read-only access. Nothing binds them: the controller-manager aggregates.
    let docs = documents(&Helm::new().template(&[]));
    let label = |role: &Value, name: &str| role["metadata"]["labels"][name].clone();
    let kinds3 = json!(["tpuslices", "preprocessbatches", "trainingpipelines"]);
    let status3 = json!([
        "tpuslices/status",
        "preprocessbatches/status",
        "trainingpipelines/status"
    ]);
    let g = json!(["tpu-operator.dev"]);
    let read = json!(["get", "list", "watch"]);

    let edit = find(&docs, "ClusterRole", Some("tpu-operator-edit"));
    assert_eq!(label(edit, "rbac.authorization.k8s.io/aggregate-to-edit"), "true");
    assert_eq!(
        label(edit, "rbac.authorization.k8s.io/aggregate-to-admin"),
        "true"
    );
    assert_eq!(
        label(edit, "rbac.authorization.k8s.io/aggregate-to-view"),
        Value::Null
    );
    assert_eq!(
        rules(edit),
        vec![
            json!([
                g,
                kinds3,
                null,
                [
                    "get",
                    "list",
                    "watch",
                    "create",
                    "update",
                    "patch",
                    "delete",
                    "deletecollection"
                ]
            ]),
            json!([g, status3, null, read]),
        ]
    );
    let view = find(&docs, "ClusterRole", Some("tpu-operator-view"));
    assert_eq!(label(view, "rbac.authorization.k8s.io/aggregate-to-view"), "true");
    assert_eq!(
        label(view, "rbac.authorization.k8s.io/aggregate-to-edit"),
        Value::Null
    );
    let mut view_resources: Vec<Value> = kinds3.as_array().unwrap().clone();
    view_resources.extend(status3.as_array().unwrap().iter().cloned());
    assert_eq!(rules(view), vec![json!([g, view_resources, null, read])]);
    for role in ["tpu-operator-edit", "tpu-operator-view"] {
        assert!(
            !docs
                .iter()
                .any(|d| d["kind"].as_str().unwrap().ends_with("Binding") && d["roleRef"]["name"] == role),
            "{role} is aggregated, not bound"
        );
    }

    // Off: no aggregated roles, everything else unchanged.
    let off = documents(&Helm::new().template(&["--set", "rbac.aggregateToDefaultRoles=false"]));
    assert_eq!(off.len() + 2, docs.len());
    assert!(!off.iter().any(|d| {
        d["metadata"]["labels"].as_object().is_some_and(|l| {
            l.keys()
                .any(|k| k.starts_with("rbac.authorization.k8s.io/aggregate-to"))
        })
    }));
}

#[test]
fn optional_parts_render_when_enabled() {
    let docs = documents(&Helm::new().template(ALL_OPTIONS));
    for kind in ["ServiceMonitor", "PrometheusRule", "NetworkPolicy"] {
        find(&docs, kind, None);
    }
    let example = find(&docs, "TpuPolicy", Some("example-team"));
    assert_eq!(example["spec"]["namespaces"], json!(["team-a"]));
    assert_eq!(example["spec"]["maxChips"], 16);
    let emulator = find(&docs, "Deployment", Some("tpu-operator-gcp-emulator"));
    let args = &emulator["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args, &json!(["--listen", "0.0.0.0:8085", "--time-scale", "1"]));
    find(&docs, "Service", Some("tpu-operator-gcp-emulator"));
    assert_eq!(
        operator_config(&docs)["gcpEmulator"],
        "http://tpu-operator-gcp-emulator.tpu-operator.svc:8085"
    );
    // The metrics Service (and so the ServiceMonitor) selects operator pods only, not the emulator.
    let svc = find(&docs, "Service", Some("tpu-operator"));
    assert_eq!(svc["spec"]["selector"]["app.kubernetes.io/component"], "operator");
    let dashboard = find(&docs, "ConfigMap", Some("tpu-operator-dashboard"));
    let json: Value = serde_json::from_str(dashboard["data"]["tpu-operator.json"].as_str().unwrap()).unwrap();
    assert_eq!(json["uid"], "tpu-operator");
    let ksm = find(&docs, "ConfigMap", Some("tpu-operator-kube-state-metrics"));
    let ksm: Value =
        serde_yaml::from_str(ksm["data"]["custom-resource-state.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(ksm["spec"]["resources"].as_array().unwrap().len(), 3);
    let rule = find(&docs, "PrometheusRule", None);
    let alerts: Vec<&str> = rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    assert_eq!(
        alerts,
        [
            "TpuOperatorNoLeader",
            "TpuOperatorMultipleLeaders",
            "TpuOperatorReconcileErrors",
            "TpuOperatorOrphansFound",
            "TpuOperatorGcpErrorRate",
            "TpuOperatorGcpPermissionDenied",
            "TpuOperatorObjectStalled",
            "TpuOperatorObjectNotObserved",
            "TpuSliceRunningLong",
            "TpuSliceIdle",
            "TrainingPipelineNoProgress"
        ]
    );
    // One replica: no PodDisruptionBudget (it would block every drain).
    let docs = documents(&Helm::new().template(&["--set", "replicaCount=1,config.leaderElect=false"]));
    assert!(!kinds(&docs).contains(&"PodDisruptionBudget".to_string()));
    assert!(
        !docs
            .iter()
            .any(|d| d["metadata"]["name"] == "tpu-operator-leader-election")
    );
}

/// `kueue.enabled` turns the integration on in the binary's config and grants exactly the Kueue
/// calls crates/controller/src/kueue/client.rs makes; off, none of them.
#[test]
fn kueue_enabled_grants_the_workload_calls_and_turns_the_integration_on() {
    let docs = documents(&Helm::new().template(&["--set", "kueue.enabled=true"]));
    assert_eq!(operator_config(&docs)["kueue"], true);
    let controller = rules(find(&docs, "ClusterRole", Some("tpu-operator")));
    for rule in [
        json!([
            ["kueue.x-k8s.io"],
            ["workloads"],
            null,
            ["get", "list", "watch", "create", "patch", "delete"]
        ]),
        json!([["kueue.x-k8s.io"], ["workloads/status"], null, ["patch"]]),
        json!([["kueue.x-k8s.io"], ["localqueues"], null, ["list", "watch"]]),
        json!([
            ["visibility.kueue.x-k8s.io"],
            ["localqueues/pendingworkloads"],
            null,
            ["get"]
        ]),
    ] {
        assert!(controller.contains(&rule), "missing {rule} in {controller:#?}");
    }
    let priorities = rules(find(&docs, "ClusterRole", Some("tpu-operator-kueue-priorities")));
    assert_eq!(
        priorities,
        [json!([
            ["kueue.x-k8s.io"],
            ["workloadpriorityclasses"],
            null,
            ["get", "list", "watch"]
        ])]
    );
    let crds = find(&docs, "ClusterRole", Some("tpu-operator-crds"));
    assert!(
        crds["rules"][0]["resourceNames"]
            .as_array()
            .unwrap()
            .contains(&json!("workloads.kueue.x-k8s.io"))
    );

    // The default queue reaches the operator's config (without the integration on the chart
    // refuses it: `bad_values_are_rejected_by_the_schema`).
    assert!(operator_config(&docs).get("kueueDefaultQueue").is_none());
    let default_queue = documents(&Helm::new().template(&[
        "--set",
        "kueue.enabled=true",
        "--set",
        "kueue.defaultQueue=default",
    ]));
    assert_eq!(operator_config(&default_queue)["kueueDefaultQueue"], "default");

    let off = documents(&Helm::new().template(&[]));
    assert!(operator_config(&off).get("kueue").is_none());
    let text = serde_json::to_string(&off).unwrap();
    assert!(
        !text.contains("kueue.x-k8s.io"),
        "no Kueue rule without kueue.enabled"
    );
}

#[test]
fn bad_values_are_rejected_by_the_schema() {
    let helm = Helm::new();
    let chart = chart_dir();
    for (set, expected) in [
        ("replicaCount=two", "replicaCount"),
        ("replicas=2", "replicas"),
        ("config.concurency=3", "concurency"),
        ("config.concurrency=0", "concurrency"),
        ("config.logFormat=xml", "logFormat"),
        ("config.pollActive=soon", "pollActive"),
        ("scope=Everything", "scope"),
        (
            "serviceAccount.gcpServiceAccount=not-an-email",
            "gcpServiceAccount",
        ),
        ("metrics.port=70000", "port"),
        ("gcpEmulator.timeScale=0", "timeScale"),
        ("kueue.defaultQueue=default", "set kueue.enabled=true"),
        ("kueue.defaultQueue=Team_A", "defaultQueue"),
    ] {
        let out = helm.run(&["template", "x", chart.to_str().unwrap(), "--set", set]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--set {set} was accepted");
        assert!(
            stderr.contains(expected),
            "--set {set}: the error does not name {expected}:\n{stderr}"
        );
    }
    // Strings for numbers are refused where a YAML values file would be too.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, "config:\n  concurrency: \"16\"\n").unwrap();
    let out = helm.run(&[
        "template",
        "x",
        chart.to_str().unwrap(),
        "-f",
        file.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
}

#[test]
fn several_replicas_without_leader_election_are_refused() {
    // Every replica would run the controllers: the template fails (templates/_helpers.tpl,
    // `tpu-operator.validate`) with a message naming both values and the fix.
    let helm = Helm::new();
    let chart = chart_dir();
    let out = helm.run(&[
        "template",
        "x",
        chart.to_str().unwrap(),
        "--set",
        "replicaCount=2",
        "--set",
        "config.leaderElect=false",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "replicaCount=2 without leader election rendered"
    );
    for expected in [
        "replicaCount=2",
        "config.leaderElect=false",
        "Keep config.leaderElect=true",
        "set replicaCount=1",
    ] {
        assert!(
            stderr.contains(expected),
            "the error does not say {expected:?}:\n{stderr}"
        );
    }
    // The safe combinations render: one replica without election, several with it.
    helm.ok(&[
        "template",
        "x",
        chart.to_str().unwrap(),
        "--set",
        "replicaCount=1,config.leaderElect=false",
    ]);
    helm.ok(&[
        "template",
        "x",
        chart.to_str().unwrap(),
        "--set",
        "replicaCount=3",
    ]);
}

#[test]
fn orphan_deletion_with_a_shared_cluster_id_is_refused() {
    // The binary refuses it at start-up (config.rs); the chart already at render time.
    let helm = Helm::new();
    let chart = chart_dir();
    let out = helm.run(&[
        "template",
        "x",
        chart.to_str().unwrap(),
        "--set",
        "config.orphans=delete,config.clusterId=default",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "orphans=delete with clusterId=default rendered"
    );
    assert!(
        stderr.contains("config.clusterId=default") && stderr.contains("Leave config.clusterId empty"),
        "{stderr}"
    );
    for ok in [
        "config.orphans=delete",
        "config.orphans=delete,config.clusterId=prod-eu-1",
    ] {
        helm.ok(&["template", "x", chart.to_str().unwrap(), "--set", ok]);
    }
}

#[test]
fn notes_crd_upgrade_commands_run_as_written() {
    // NOTES.txt (what `helm install` / `helm upgrade` print) tells how to upgrade the CRDs, which
    // Helm never does. Every URL it gives must name a file of the repository (kubectl cannot apply
    // a directory URL), every kubectl apply must be server-side with --force-conflicts (Helm's
    // field manager created the CRDs), and the chart variant is `helm show crds`
    // (tests/chart_apply.rs runs that pipeline against kube-emulator).
    let notes = rendered_notes(&[]);
    let urls: Vec<&str> = notes
        .split_whitespace()
        .filter(|w| w.starts_with("https://raw.githubusercontent.com/"))
        .collect();
    // One file per CRD the binary waits for before it is ready (an upgrade that skips one hangs).
    assert_eq!(urls.len(), tpu_operator_api::crds::all().len(), "{notes}");
    let tag = format!("/v{}/", chart_app_version());
    for url in &urls {
        let (_, path) = url
            .split_once(&tag)
            .unwrap_or_else(|| panic!("{url} does not point at the release tag {tag}"));
        assert!(
            path.ends_with(".yaml") && repo_root().join(path).is_file(),
            "{url} is not a file of the repository"
        );
    }
    // The CRD applies (the tenancy note's `kubectl apply -f - <<'EOF'` of a TpuPolicy is not one).
    let applies: Vec<&str> = notes
        .lines()
        .filter(|l| l.contains("kubectl apply") && !l.contains("<<"))
        .collect();
    assert_eq!(applies.len(), 2, "{notes}");
    for line in applies {
        assert!(line.contains("--server-side --force-conflicts"), "{line}");
    }
    assert!(
        notes.contains("helm show crds <chart> | kubectl apply --server-side --force-conflicts -f -"),
        "{notes}"
    );
}

/// The binary waits for every CRD of `tpu_operator_api::crds::all()` to be Established before it
/// turns ready: NOTES.txt (the upgrade commands and the check) and docs/install.md (upgrade and
/// uninstall) must name each of them, or an upgrade done as written never becomes ready.
#[test]
fn notes_and_install_docs_name_every_crd_the_binary_waits_for() {
    let notes = rendered_notes(&[]);
    let install = std::fs::read_to_string(repo_root().join("docs/install.md")).unwrap();
    let get_line = notes
        .lines()
        .find(|l| l.contains("kubectl get crd"))
        .expect("NOTES has a `kubectl get crd` check");
    let delete_line = install
        .lines()
        .find(|l| l.starts_with("kubectl delete crd"))
        .expect("install.md has the `kubectl delete crd` uninstall step");
    for crd in tpu_operator_api::crds::all() {
        let name = crd.metadata.name.unwrap();
        let file = format!("/crds/{name}.yaml");
        assert!(get_line.contains(&name), "NOTES' check lacks {name}: {get_line}");
        assert!(
            notes.contains(&file),
            "NOTES' upgrade commands lack {file}:\n{notes}"
        );
        assert!(
            install.contains(&file),
            "install.md's upgrade commands lack {file}"
        );
        assert!(
            delete_line.contains(&name),
            "install.md's uninstall lacks {name}: {delete_line}"
        );
    }
}

/// `extraEnv` (proxy, quota project, trust store) reaches the operator container as given,
/// after the chart's own variables, `valueFrom` included; the schema refuses an entry without a
/// name. The chart's metrics address is dual-stack.
#[test]
fn extra_env_renders_into_the_operator_container() {
    let helm = Helm::new();
    let extra = r#"extraEnv=[{"name":"HTTPS_PROXY","value":"http://proxy.corp.example:3128"},{"name":"NO_PROXY","value":"169.254.169.254,metadata.google.internal"},{"name":"SSL_CERT_FILE","value":"/etc/ssl/certs/corp.pem"},{"name":"GOOGLE_CLOUD_QUOTA_PROJECT","valueFrom":{"configMapKeyRef":{"name":"gcp","key":"quota-project"}}}]"#;
    let docs = documents(&helm.template(&["--set-json", extra]));
    let deployment = find(&docs, "Deployment", Some("tpu-operator"));
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env")
        .clone();
    let names: Vec<&str> = env.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "POD_NAME",
            "POD_NAMESPACE",
            "RUST_LOG",
            "HTTPS_PROXY",
            "NO_PROXY",
            "SSL_CERT_FILE",
            "GOOGLE_CLOUD_QUOTA_PROJECT"
        ]
    );
    assert_eq!(env[3]["value"], "http://proxy.corp.example:3128");
    assert_eq!(env[4]["value"], "169.254.169.254,metadata.google.internal");
    assert_eq!(
        env[6]["valueFrom"],
        json!({"configMapKeyRef": {"name": "gcp", "key": "quota-project"}})
    );
    // Defaults render no extra variable.
    let plain = documents(&helm.template(&[]));
    let env =
        &find(&plain, "Deployment", Some("tpu-operator"))["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(env.as_array().unwrap().len(), 3, "{env}");
    assert_eq!(operator_config(&plain)["metricsAddr"], "[::]:8080");

    let chart = chart_dir();
    let refused = helm.run(&[
        "template",
        "x",
        chart.to_str().unwrap(),
        "--set-json",
        r#"extraEnv=[{"value":"no name"}]"#,
    ]);
    assert!(
        !refused.status.success(),
        "an entry without a name must be refused"
    );
}

/// NOTES.txt as `helm install` prints it (a client-side dry run: no cluster needed).
fn rendered_notes(extra: &[&str]) -> String {
    let chart = chart_dir();
    let mut args = vec![
        "install",
        "tpu-operator",
        chart.to_str().unwrap(),
        "--namespace",
        "tpu-operator",
        "--dry-run=client",
    ];
    args.extend_from_slice(extra);
    let out = Helm::new().ok(&args);
    let (_, notes) = out.split_once("\nNOTES:\n").expect("helm install prints NOTES");
    notes.to_string()
}

fn chart_app_version() -> String {
    let chart: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap()).unwrap();
    chart["appVersion"].as_str().unwrap().to_string()
}

#[test]
fn config_keys_are_the_binary_config_keys() {
    // Every key the chart can put in the ConfigMap must be one `tpu-operator run --config` knows
    // (it denies unknown keys); tests/chart_apply.rs also starts the binary on the rendered file.
    // Some keys exist only in the config file (tenancy, prices, orphanProjects, ...), so the
    // reference is the file's schema as the binary prints it (`tpu-operator config-schema`), not
    // the flags of `run --help`.
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap())
            .unwrap();
    let mut keys: BTreeSet<String> = schema["properties"]["config"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    keys.extend(["metricsAddr", "namespace", "gcpEmulator"].map(String::from));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tpu-operator"))
        .arg("config-schema")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let binary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        binary["additionalProperties"], false,
        "the binary must refuse unknown config keys"
    );
    let known = binary["properties"].as_object().unwrap();
    for key in keys {
        assert!(
            known.contains_key(&key),
            "config key {key} is not in `tpu-operator config-schema`: the binary would refuse it"
        );
    }
}

#[test]
fn rendered_built_in_objects_match_the_kubernetes_api_types() {
    // kube-emulator serves only some built-in kinds, so the others are checked against the API
    // types: deserialize into k8s-openapi's struct and serialize back; a misspelled or misplaced
    // field disappears in the round trip.
    use k8s_openapi::api::{admissionregistration, apps, core, networking, policy, rbac};
    for extra in [&[][..], ALL_OPTIONS, &["--set", "scope=Namespace"]] {
        for doc in documents(&Helm::new().template(extra)) {
            let kind = doc["kind"].as_str().unwrap().to_string();
            let back = match kind.as_str() {
                "Deployment" => round_trip::<apps::v1::Deployment>(&doc),
                "Service" => round_trip::<core::v1::Service>(&doc),
                "ServiceAccount" => round_trip::<core::v1::ServiceAccount>(&doc),
                "ConfigMap" => round_trip::<core::v1::ConfigMap>(&doc),
                "ClusterRole" => round_trip::<rbac::v1::ClusterRole>(&doc),
                "ClusterRoleBinding" => round_trip::<rbac::v1::ClusterRoleBinding>(&doc),
                "Role" => round_trip::<rbac::v1::Role>(&doc),
                "RoleBinding" => round_trip::<rbac::v1::RoleBinding>(&doc),
                "PodDisruptionBudget" => round_trip::<policy::v1::PodDisruptionBudget>(&doc),
                "NetworkPolicy" => round_trip::<networking::v1::NetworkPolicy>(&doc),
                "TpuPolicy" => round_trip::<tpu_operator_api::TpuPolicy>(&doc),
                "ValidatingAdmissionPolicy" => {
                    round_trip::<admissionregistration::v1::ValidatingAdmissionPolicy>(&doc)
                }
                "ValidatingAdmissionPolicyBinding" => {
                    round_trip::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>(&doc)
                }
                "ServiceMonitor" | "PrometheusRule" => {
                    assert_eq!(doc["apiVersion"], "monitoring.coreos.com/v1");
                    continue;
                }
                other => panic!("unexpected kind {other}"),
            };
            assert_eq!(
                normalize(doc.clone()),
                normalize(back),
                "{kind} {} does not survive the API types",
                doc["metadata"]["name"]
            );
        }
    }
}

#[test]
fn generated_files_are_current() {
    let helm = Helm::new();
    let root = repo_root();
    let bless = std::env::var_os("TPU_OPERATOR_BLESS").is_some();
    let mut stale = Vec::new();
    for (path, expected) in generate::expected_files(&helm) {
        let full = root.join(&path);
        if std::fs::read_to_string(&full).ok().as_deref() != Some(expected.as_str()) {
            if bless {
                std::fs::create_dir_all(full.parent().unwrap()).unwrap();
                std::fs::write(&full, expected).unwrap();
            } else {
                stale.push(path.display().to_string());
            }
        }
    }
    assert!(
        stale.is_empty(),
        "out of date: {stale:?}; run TPU_OPERATOR_BLESS=1 cargo test -p tpu-operator --test chart and commit the result"
    );
    // The kustomize bases build (kubectl's built-in kustomize).
    // deploy/ and deploy/staging once the images are set (tests/install_paths.rs checks that they
    // refuse to build before).
    for (sub, objects) in [("", 30), ("staging", 32), ("monitoring", 4)] {
        assert_eq!(
            documents(&support::kustomize_with_images(sub)).len(),
            objects,
            "objects in deploy/{sub}"
        );
    }
}

#[test]
fn every_value_is_documented_and_in_the_schema() {
    let values: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap()).unwrap();
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap())
            .unwrap();
    let documented: Vec<Vec<String>> = generate::documented_values()
        .into_iter()
        .map(|d| d.path)
        .collect();
    // Every leaf of values.yaml is documented itself or through a documented parent.
    fn leaves(v: &Value, path: Vec<String>, out: &mut Vec<Vec<String>>) {
        match v.as_object() {
            Some(m) if !m.is_empty() => m.iter().for_each(|(k, v)| {
                let mut p = path.clone();
                p.push(k.clone());
                leaves(v, p, out)
            }),
            _ => out.push(path),
        }
    }
    let mut all = Vec::new();
    leaves(&values, vec![], &mut all);
    for leaf in all {
        assert!(
            documented.iter().any(|d| leaf.starts_with(d)),
            "values.yaml: {} has no `# --` description",
            leaf.join(".")
        );
        let top = generate::schema_at(&schema, &leaf[..1]);
        assert!(top.is_some(), "values.schema.json does not declare {}", leaf[0]);
    }
    for d in &documented {
        assert!(
            generate::schema_at(&schema, d).is_some(),
            "values.schema.json does not declare {}",
            d.join(".")
        );
        assert!(
            generate::lookup(&values, d).is_some(),
            "documented {} is not in values.yaml",
            d.join(".")
        );
    }
}

fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value) -> Value {
    let typed: T = serde_json::from_value(doc.clone()).expect("deserializes into the API type");
    serde_json::to_value(typed).unwrap()
}

/// Drops nulls and empty objects / arrays (absent and empty are the same to the API types).
fn normalize(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, normalize(v)))
                .filter(|(_, v)| !(v.is_null() || v == &json!({}) || v == &json!([])))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(normalize).collect()),
        other => other,
    }
}

fn operator_config(docs: &[Value]) -> Value {
    let cm = find(docs, "ConfigMap", Some("tpu-operator"));
    serde_yaml::from_str(cm["data"]["config.yaml"].as_str().unwrap()).unwrap()
}

/// (apiGroups, resources, resourceNames, verbs) per rule.
fn rules(role: &Value) -> Vec<Value> {
    role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            json!([
                r["apiGroups"],
                r["resources"],
                r.get("resourceNames").cloned().unwrap_or(Value::Null),
                r["verbs"]
            ])
        })
        .collect()
}

/// What the controllers do (crates/controller): see the comments in templates/rbac.yaml.
fn controller_rules() -> Vec<Value> {
    let g = json!(["tpu-operator.dev"]);
    vec![
        json!([
            g,
            ["tpuslices", "preprocessbatches", "trainingpipelines"],
            null,
            ["get", "list", "watch", "patch"]
        ]),
        json!([g, ["tpuslices", "preprocessbatches"], null, ["create", "delete"]]),
        json!([
            g,
            [
                "tpuslices/status",
                "preprocessbatches/status",
                "trainingpipelines/status"
            ],
            null,
            ["patch"]
        ]),
        json!([g, ["trainingpipelines/finalizers"], null, ["update"]]),
        json!([["events.k8s.io"], ["events"], null, ["create", "patch"]]),
        // The namespaces' budget views: that one ConfigMap name, written, never read.
        json!([[""], ["configmaps"], ["tpu-operator-budget"], ["create", "patch"]]),
    ]
}

fn assert_crd_reader_and_lease_role(docs: &[Value], release_ns: &str) {
    let crds = find(docs, "ClusterRole", Some("tpu-operator-crds"));
    // The startup wait reads every CRD of `tpu_operator_api::crds::all()` (the one CRD list).
    let names: Vec<String> = tpu_operator_api::crds::all()
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(
        rules(crds),
        vec![json!([
            ["apiextensions.k8s.io"],
            ["customresourcedefinitions"],
            names,
            ["get", "list", "watch"]
        ])]
    );
    let lease = find(docs, "Role", Some("tpu-operator-leader-election"));
    assert_eq!(lease["metadata"]["namespace"], release_ns);
    assert_eq!(
        rules(lease),
        vec![
            json!([["coordination.k8s.io"], ["leases"], null, ["create"]]),
            json!([
                ["coordination.k8s.io"],
                ["leases"],
                ["tpu-operator"],
                ["get", "patch"]
            ]),
        ]
    );
    // The orphan sweeper's summary ConfigMap and its events, and the leader's capacity view, in
    // the release namespace: server-side apply creates each ConfigMap (a PATCH by name, so
    // `create` is authorized by name too), then reads and patches it by name. No other name.
    let orphans = find(docs, "Role", Some("tpu-operator-orphan-report"));
    assert_eq!(orphans["metadata"]["namespace"], release_ns);
    let names = json!(["tpu-operator-orphans", "tpu-operator-capacity"]);
    assert_eq!(
        rules(orphans),
        vec![
            json!([[""], ["configmaps"], names, ["create"]]),
            json!([[""], ["configmaps"], names, ["get", "patch"]]),
            json!([["events.k8s.io"], ["events"], null, ["create", "patch"]]),
        ]
    );
    // The cluster id's source when config.clusterId is empty: the kube-system Namespace's UID.
    let cluster_id = find(docs, "ClusterRole", Some("tpu-operator-cluster-id"));
    assert_eq!(
        rules(cluster_id),
        vec![json!([[""], ["namespaces"], ["kube-system"], ["get"]])]
    );
    let binding = find(docs, "ClusterRoleBinding", Some("tpu-operator-cluster-id"));
    assert_eq!(binding["roleRef"]["name"], "tpu-operator-cluster-id");
    assert_eq!(
        binding["subjects"][0],
        json!({"kind": "ServiceAccount", "name": "tpu-operator", "namespace": release_ns})
    );
}

/// The CRD schema of `kind` (from crds/).
fn crd_schema(kind: &str) -> Value {
    for entry in std::fs::read_dir(repo_root().join("crds")).unwrap() {
        let crd: Value =
            serde_yaml::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap()).unwrap();
        if crd["spec"]["names"]["kind"] == kind {
            return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
        }
    }
    panic!("no CRD for {kind}")
}

/// The schema at `path` (object properties, through arrays' items); `metadata` holds the
/// standard fields the API server fills in.
fn schema_path<'a>(schema: &'a Value, path: &[Value]) -> Option<&'a Value> {
    let mut at = schema;
    for (i, seg) in path.iter().enumerate() {
        let seg = seg.as_str()?;
        if i == 0 && seg == "metadata" {
            return ["name", "namespace", "generation"]
                .contains(&path.get(1)?.as_str()?)
                .then_some(at);
        }
        if at["type"] == "array" {
            at = &at["items"];
        }
        at = at["properties"].get(seg)?;
    }
    Some(at)
}

/// Issue 36 (an adversary's read of the shipped monitoring): every path the kube-state-metrics
/// config reads exists in its kind's CRD, and each phase state set lists exactly the CRD's
/// phases. Without this a renamed field or a new phase leaves a metric silently empty: the
/// phases Waiting (all kinds) and Suspended (TpuSlice) were missing until this test.
#[test]
fn kube_state_metrics_reads_fields_the_crds_have() {
    let ksm: Value = serde_yaml::from_str(
        &std::fs::read_to_string(chart_dir().join("files/kube-state-metrics.yaml")).unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    for resource in ksm["spec"]["resources"].as_array().unwrap() {
        let kind = resource["groupVersionKind"]["kind"].as_str().unwrap();
        let schema = crd_schema(kind);
        let exists = |path: &Value, what: &str| {
            let path = path.as_array().unwrap();
            assert!(
                schema_path(&schema, path).is_some(),
                "{kind} {what}: {path:?} is not in the CRD"
            );
        };
        for (label, path) in resource["labelsFromPath"].as_object().unwrap() {
            exists(path, label);
        }
        for metric in resource["metrics"].as_array().unwrap() {
            let name = metric["name"].as_str().unwrap();
            let each = &metric["each"];
            match each["type"].as_str().unwrap() {
                "Gauge" => {
                    let gauge = &each["gauge"];
                    exists(&gauge["path"], name);
                    let mut base = gauge["path"].as_array().unwrap().clone();
                    for (label, rel) in gauge["labelsFromPath"].as_object().into_iter().flatten() {
                        let mut full = base.clone();
                        full.extend(rel.as_array().unwrap().iter().cloned());
                        exists(&Value::Array(full), &format!("{name}.{label}"));
                    }
                    if let Some(rel) = gauge["valueFrom"].as_array() {
                        base.extend(rel.iter().cloned());
                        exists(&Value::Array(base), &format!("{name}.valueFrom"));
                    }
                }
                "StateSet" => {
                    let set = &each["stateSet"];
                    let path = set["path"].as_array().unwrap();
                    let field =
                        schema_path(&schema, path).unwrap_or_else(|| panic!("{kind} {name}: {path:?}"));
                    let mut want: Vec<&str> = field["enum"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap())
                        .collect();
                    let mut have: Vec<&str> = set["list"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap())
                        .collect();
                    want.sort_unstable();
                    have.sort_unstable();
                    assert_eq!(
                        have, want,
                        "{kind} {name}: the state set must list every phase of the CRD"
                    );
                }
                "Info" => {
                    for (label, path) in each["info"]["labelsFromPath"].as_object().unwrap() {
                        exists(path, &format!("{name}.{label}"));
                    }
                }
                other => panic!("{kind} {name}: metric type {other} is not checked here"),
            }
            checked += 1;
        }
    }
    assert!(checked >= 25, "checked {checked} metrics");
}

/// Issue 36 item 5: the shipped dashboard has the per-pipeline table (phase, spend, checkpoint,
/// logs link) and reads only series the kube-state-metrics config defines.
#[test]
fn the_dashboard_shows_each_pipeline_with_its_logs_link() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("files/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    let ksm = std::fs::read_to_string(chart_dir().join("files/kube-state-metrics.yaml")).unwrap();
    let panel = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("Training pipelines"))
        })
        .expect("a Training pipelines panel");
    let exprs: Vec<&str> = panel["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["expr"].as_str().unwrap())
        .collect();
    for metric in [
        "phase",
        "estimated_cost_usd",
        "checkpoint_step",
        "checkpoint_time_seconds",
        "goodput_percent",
        "links",
    ] {
        let series = format!("tpu_operator_resource_{metric}");
        assert!(exprs.iter().any(|e| e.contains(&series)), "{series} not shown");
        assert!(
            ksm.contains(&format!("- name: {metric}\n")),
            "{series} is not defined by kube-state-metrics"
        );
    }
    let link = &panel["fieldConfig"]["overrides"][0];
    assert_eq!(link["matcher"]["options"], "logs");
    assert_eq!(link["properties"][0]["value"][0]["url"], "${__value.raw}");
}
