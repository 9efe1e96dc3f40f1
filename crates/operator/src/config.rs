//! Settings of `tpu-operator run`: command-line flags, each with a `TPU_OPERATOR_*` environment
//! fallback, over an optional YAML file (`--config`), over built-in defaults.
//!
//! Every flag is an `Option` without a clap default, so "not given" is visible and the file can
//! fill it in; defaults are applied last, in [`RunArgs::resolve`].

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, ValueEnum};
use schemars::JsonSchema;
use serde::Deserialize;
use tpu_operator_controller::governance::{pricing::PriceOverrides, tenancy::WithoutPolicy};

/// What the orphan sweeper does with cloud resources whose owning object is gone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OrphanMode {
    /// Do not sweep.
    Off,
    /// Report them (metric, log, events and the tpu-operator-orphans ConfigMap).
    #[default]
    Report,
    /// Report them and delete them after the grace period.
    Delete,
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// Settings of `tpu-operator run`. Each scalar setting is a flag (with a `TPU_OPERATOR_*`
/// environment fallback) and a camelCase key of the `--config` YAML file; the structured ones
/// (prices, where the sweeper looks) are file keys only. The same type is the file's
/// schema: unknown keys are errors, and the `config` part of the Helm chart's `values.schema.json`
/// is generated from it ([`values_schema_config`]), so chart and binary cannot drift apart.
#[derive(Debug, Clone, Default, Args, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "tpu-operator run --config")]
pub struct RunArgs {
    /// YAML file with any of the settings below (camelCase keys, e.g. `metricsAddr`); flags and
    /// environment variables override it.
    #[arg(long, env = "TPU_OPERATOR_CONFIG", value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Kubeconfig to use (default: in-cluster service account, else `$KUBECONFIG` / ~/.kube/config).
    #[arg(long, env = "TPU_OPERATOR_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Google Cloud project for objects that do not name one.
    #[arg(long, env = "TPU_OPERATOR_PROJECT")]
    #[schemars(pattern(r"^(|([a-z][-.a-z0-9]*:)?[a-z][-a-z0-9]{4,28}[a-z0-9])$"))]
    pub project: Option<String>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "TPU_OPERATOR_NAMESPACE")]
    pub namespace: Option<String>,
    /// Point every GCP service at a gcp-emulator base URL (anonymous credentials).
    #[arg(long, env = "TPU_OPERATOR_GCP_EMULATOR", value_name = "URL")]
    #[schemars(pattern(r"^(|https?://.+)$"))]
    pub gcp_emulator: Option<String>,
    /// Cloud TPU API endpoint (e.g. a Private Service Connect endpoint; default: the public one).
    #[arg(long, env = "TPU_OPERATOR_TPU_ENDPOINT", value_name = "URL")]
    #[schemars(pattern(r"^(|https?://.+)$"))]
    pub tpu_endpoint: Option<String>,
    /// Dataproc API endpoint; `{region}` is replaced by the batch's region, e.g.
    /// `https://{region}-dataproc.googleapis.com` for the regional endpoints (default: the
    /// public global one).
    #[arg(long, env = "TPU_OPERATOR_DATAPROC_ENDPOINT", value_name = "URL")]
    #[schemars(pattern(r"^(|https?://.+)$"))]
    pub dataproc_endpoint: Option<String>,
    /// Vertex AI endpoint; `{region}` is replaced by the resource's region (default: the public
    /// regional endpoint).
    #[arg(long, env = "TPU_OPERATOR_VERTEX_ENDPOINT", value_name = "URL")]
    #[schemars(pattern(r"^(|https?://.+)$"))]
    pub vertex_endpoint: Option<String>,
    /// Cloud Storage JSON API endpoint (default: the public one).
    #[arg(long, env = "TPU_OPERATOR_STORAGE_ENDPOINT", value_name = "URL")]
    #[schemars(pattern(r"^(|https?://.+)$"))]
    pub storage_endpoint: Option<String>,
    /// Compute Engine API base URL, for TpuSlices with `provisioner: ComputeEngine` (requests go
    /// to `{url}/compute/v1/...`; default: the public one).
    #[arg(long, env = "TPU_OPERATOR_COMPUTE_ENDPOINT", value_name = "URL")]
    #[schemars(pattern(r"^(|https?://.+)$"))]
    pub compute_endpoint: Option<String>,
    /// Cloud Logging API base URL, for a failed TPU VM workload's last log lines (requests go to
    /// `{url}/v2/entries:list`; default: the public one).
    #[arg(long, env = "TPU_OPERATOR_LOGGING_ENDPOINT", value_name = "URL")]
    #[schemars(pattern(r"^(|https?://.+)$"))]
    pub logging_endpoint: Option<String>,
    /// Upper bound on one GCP call, the wait for a token included (a token must arrive within
    /// half of it; building the clients at start-up may take twice it) [default: 30s].
    #[arg(long, env = "TPU_OPERATOR_GCP_CALL_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(default, deserialize_with = "duration::deserialize")]
    #[schemars(schema_with = "duration::schema")]
    pub gcp_call_timeout: Option<Duration>,
    /// Reconciles run at once per controller [default: 16].
    #[arg(long, env = "TPU_OPERATOR_CONCURRENCY")]
    #[schemars(range(min = 1))]
    pub concurrency: Option<u16>,
    /// Requeue interval while cloud state changes [default: 2s].
    #[arg(long, env = "TPU_OPERATOR_POLL_ACTIVE", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(default, deserialize_with = "duration::deserialize")]
    #[schemars(schema_with = "duration::schema")]
    pub poll_active: Option<Duration>,
    /// Requeue interval while nothing is expected to change [default: 5m].
    #[arg(long, env = "TPU_OPERATOR_POLL_STABLE", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(default, deserialize_with = "duration::deserialize")]
    #[schemars(schema_with = "duration::schema")]
    pub poll_stable: Option<Duration>,
    /// Requeue interval while waiting for TPU capacity [default: 30s].
    #[arg(long, env = "TPU_OPERATOR_POLL_CAPACITY", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(default, deserialize_with = "duration::deserialize")]
    #[schemars(schema_with = "duration::schema")]
    pub poll_capacity: Option<Duration>,
    /// Watch cloud state changes with one paged `list` per collection and location instead of a
    /// read per waiting object every --poll-active (`--watch-lists=false` needs no `list`
    /// permission) [default: true].
    #[arg(long, env = "TPU_OPERATOR_WATCH_LISTS", num_args = 0..=1, default_missing_value = "true")]
    pub watch_lists: Option<bool>,
    /// Kueue admits the TPU work of objects labelled `kueue.x-k8s.io/queue-name`: their
    /// Workloads wait in Kueue's queues, nothing is created in Google Cloud before admission, and
    /// an eviction stops the work (docs/kueue.md). Needs Kueue installed with the operator's
    /// kinds as external frameworks [default: false].
    #[arg(long, env = "TPU_OPERATOR_KUEUE", num_args = 0..=1, default_missing_value = "true")]
    pub kueue: Option<bool>,
    /// With --kueue: the LocalQueue, in each object's namespace, that gates the objects without
    /// a `kueue.x-k8s.io/queue-name` label (or with an empty one), so leaving the label off does
    /// not skip Kueue's quotas (what Kueue's `manageJobsWithoutQueueName` does for its own
    /// integrations). A namespace without that LocalQueue runs nothing until it has one: Kueue
    /// keeps the Workload pending. Unset: objects without the label are not gated.
    #[arg(long, env = "TPU_OPERATOR_KUEUE_DEFAULT_QUEUE", value_name = "NAME")]
    pub kueue_default_queue: Option<String>,
    /// Google's per-minute rate quota of a method group, which the operator paces its creates
    /// to (docs/capacity.md): `GROUP=PER_MINUTE`, repeatable or comma-separated, GROUP one of
    /// `tpuCreate`, `computeMutate`, `dataprocBatchCreate`, `vertexJobCreate`; 0 turns a
    /// group's pacing off. Overrides the config file's `createLimits` group by group
    /// [default: tpuCreate=91, computeMutate=1500, dataprocBatchCreate=200, vertexJobCreate=60].
    #[arg(
        long = "create-limit",
        env = "TPU_OPERATOR_CREATE_LIMITS",
        value_name = "GROUP=PER_MINUTE",
        value_delimiter = ','
    )]
    #[serde(skip)]
    pub create_limit: Vec<String>,
    /// The config file's form of --create-limit: a map from method group to Google's quota per
    /// minute (0: not paced), e.g. `{tpuCreate: 60}`; groups left out keep their default.
    #[arg(skip)]
    #[serde(default)]
    pub create_limits: BTreeMap<String, u32>,
    /// Backstop read interval of an object whose cloud resource the list watch covers
    /// [default: 5m].
    #[arg(long, env = "TPU_OPERATOR_POLL_WATCHED", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(default, deserialize_with = "duration::deserialize")]
    #[schemars(schema_with = "duration::schema")]
    pub poll_watched: Option<Duration>,
    /// Least time between two listings of a running training pipeline's checkpoint directory
    /// (`status.checkpoint`, `spec.training.progressDeadline`) [default: 3m].
    #[arg(long, env = "TPU_OPERATOR_POLL_CHECKPOINTS", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(default, deserialize_with = "duration::deserialize")]
    #[schemars(schema_with = "duration::schema")]
    pub poll_checkpoints: Option<Duration>,
    /// Cluster id written to the `tpu-operator-cluster` label of every cloud object, so clusters
    /// sharing a project never touch each other's resources. Unset or empty: the UID of this
    /// cluster's `kube-system` Namespace, read once at start-up (unique per cluster). An explicit
    /// value must be unique among the clusters that share a project.
    #[arg(long, env = "TPU_OPERATOR_CLUSTER_ID")]
    #[schemars(pattern(r"^[-_a-z0-9]{0,63}$"))]
    pub cluster_id: Option<String>,
    /// Address of the /metrics, /healthz and /readyz server; `[::]:PORT` takes IPv4 and IPv6
    /// (dual-stack), `0.0.0.0:PORT` IPv4 only [default: [::]:8080].
    #[arg(long, env = "TPU_OPERATOR_METRICS_ADDR", value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Log format [default: text].
    #[arg(long, env = "TPU_OPERATOR_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Elect a leader through a coordination.k8s.io Lease (`--leader-elect=false` for one replica)
    /// [default: true].
    #[arg(long, env = "TPU_OPERATOR_LEADER_ELECT", num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: Option<bool>,
    /// Name of the Lease [default: tpu-operator].
    #[arg(long, env = "TPU_OPERATOR_LEASE_NAME")]
    #[schemars(pattern(r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$"), length(max = 253))]
    pub lease_name: Option<String>,
    /// Namespace of the Lease (default: `$POD_NAMESPACE`, else the watched namespace, else `default`).
    #[arg(long, env = "TPU_OPERATOR_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// How long a lease is valid without renewal: a standby takes over this long after the leader
    /// stops renewing (whole seconds, at least 2s) [default: 15s].
    #[arg(long, env = "TPU_OPERATOR_LEASE_DURATION", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(default, deserialize_with = "duration::deserialize")]
    #[schemars(schema_with = "duration::schema")]
    pub lease_duration: Option<Duration>,
    /// Identity of this replica in the Lease (default: `$POD_NAME`, else `$HOSTNAME-<pid>`).
    #[arg(long, env = "TPU_OPERATOR_IDENTITY")]
    pub identity: Option<String>,
    /// How long graceful shutdown waits for in-flight reconciles [default: 30s].
    #[arg(long, env = "TPU_OPERATOR_SHUTDOWN_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(default, deserialize_with = "duration::deserialize")]
    #[schemars(schema_with = "duration::schema")]
    pub shutdown_timeout: Option<Duration>,
    /// Orphan sweeper: cloud resources labelled with this cluster's id whose owning object no
    /// longer exists are reported, or also deleted after --orphan-grace-period [default: report].
    /// `delete` needs a cluster id unique to this cluster (not `default`). Where it looks: every
    /// place the custom resources use or have used, and `orphanProjects` × `orphanZones` /
    /// `orphanRegions` from the config file (default: the default project).
    #[arg(long, env = "TPU_OPERATOR_ORPHANS", value_enum)]
    pub orphans: Option<OrphanMode>,
    /// How long a resource must have been orphaned before --orphans=delete deletes it [default: 15m].
    #[arg(long, env = "TPU_OPERATOR_ORPHAN_GRACE_PERIOD", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(default, deserialize_with = "duration::deserialize")]
    #[schemars(schema_with = "duration::schema")]
    pub orphan_grace_period: Option<Duration>,
    /// Time between orphan sweeps [default: 10m].
    #[arg(long, env = "TPU_OPERATOR_ORPHAN_SWEEP_INTERVAL", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(default, deserialize_with = "duration::deserialize")]
    #[schemars(schema_with = "duration::schema")]
    pub orphan_sweep_interval: Option<Duration>,
    /// Projects the orphan sweeper looks in besides the ones custom resources use (config file
    /// only; default: the operator's `project`).
    #[arg(skip)]
    #[serde(default)]
    pub orphan_projects: Vec<String>,
    /// TPU zones the orphan sweeper looks in besides the ones custom resources use (config file
    /// only).
    #[arg(skip)]
    #[serde(default)]
    pub orphan_zones: Vec<String>,
    /// Dataproc / Vertex regions the orphan sweeper looks in besides the ones custom resources use
    /// (config file only; the regions of `orphanZones` are added).
    #[arg(skip)]
    #[serde(default)]
    pub orphan_regions: Vec<String>,
    /// What a namespace no TpuPolicy selects may do: `Allow` (anything, the default) or `Deny`
    /// (nothing until a policy selects it). See docs/policy.md.
    #[arg(long, env = "TPU_OPERATOR_NAMESPACES_WITHOUT_POLICY", value_parser = parse_without_policy)]
    #[serde(default)]
    pub namespaces_without_policy: Option<WithoutPolicy>,
    /// Replaced by TpuPolicy objects; present only to refuse it with directions.
    #[arg(skip)]
    #[serde(default, skip_serializing)]
    #[schemars(skip)]
    pub tenancy: Option<serde_json::Value>,
    /// Price overrides (docs/cost-model.md; config file only).
    #[arg(skip)]
    #[serde(default)]
    pub prices: PriceOverrides,
}

/// Durations in the YAML file are humantime strings (`90s`, `5m`), like the flags.
mod duration {
    use schemars::{Schema, SchemaGenerator, json_schema};
    use serde::{Deserialize, Deserializer, de::Error};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| humantime::parse_duration(&s).map_err(|e| D::Error::custom(format!("{s:?}: {e}"))))
            .transpose()
    }

    /// The subset of humantime's syntax the chart accepts: what `helm install` refuses here
    /// would be refused by the binary at start-up anyway, later and in a crash-looping pod.
    pub fn schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": "^([0-9]+(ns|us|ms|s|m|h|d))+$",
        })
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 2s or 5m: {e}"))
}

/// Keys of the config file the chart sets itself, or that must differ per replica, so
/// `values.schema.json` does not offer them: `namespace` (from `scope`/`watchNamespace`, which
/// also decide the RBAC), `metricsAddr` (from `metrics.port`), `gcpEmulator` (from
/// `gcpEmulator.enabled`), `kubeconfig` (pods use their ServiceAccount), `identity` (each pod
/// is `$POD_NAME`; a shared identity would let two replicas both lead) and `leaseNamespace` (the
/// chart's Role for the Lease is in the release namespace).
#[cfg(test)]
const CHART_OWNED_KEYS: [&str; 6] = [
    "namespace",
    "metricsAddr",
    "gcpEmulator",
    "kubeconfig",
    "identity",
    "leaseNamespace",
];

/// The JSON schema of the config file (`tpu-operator config-schema` prints it, e.g. for an
/// editor's YAML language server), every subschema inlined: Helm validates values.schema.json as
/// one draft-07 document, without the `$ref`s to shared definitions schemars would write.
pub fn config_file_schema() -> serde_json::Value {
    schemars::generate::SchemaSettings::draft07()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<RunArgs>()
        .to_value()
}

/// The JSON schema of the chart's `config` value: the config file's schema without
/// [`CHART_OWNED_KEYS`]. `charts/tpu-operator/values.schema.json` carries exactly this (a test
/// compares them; `TPU_OPERATOR_BLESS=1` rewrites it).
#[cfg(test)]
fn values_schema_config() -> serde_json::Value {
    let mut schema = config_file_schema();
    let object = schema.as_object_mut().expect("an object schema");
    object.remove("$schema");
    object.remove("title");
    object.insert(
        "description".into(),
        "Settings of `tpu-operator run --config` (generated from the binary's config types by \
         crates/operator/src/config.rs; the chart sets namespace, metricsAddr, gcpEmulator, \
         kubeconfig, identity and leaseNamespace itself)."
            .into(),
    );
    let properties = object
        .get_mut("properties")
        .and_then(|p| p.as_object_mut())
        .expect("properties");
    for key in CHART_OWNED_KEYS {
        properties.remove(key);
    }
    schema
}

mod settings;

pub use settings::{ClusterIdSource, LeaderSettings, Settings};

fn parse_without_policy(s: &str) -> Result<WithoutPolicy, String> {
    match s {
        "Allow" | "allow" => Ok(WithoutPolicy::Allow),
        "Deny" | "deny" => Ok(WithoutPolicy::Deny),
        _ => Err(format!("{s:?}: expected Allow or Deny")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tpu_operator_controller::{ControllerConfig, sweeper::Mode};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(args: &[&str]) -> RunArgs {
        Cli::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
            .expect("flags parse")
            .run
    }

    #[test]
    fn flags_override_the_file_and_defaults_fill_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("operator.yaml");
        std::fs::write(
            &file,
            "project: from-file\nconcurrency: 3\npollActive: 750ms\nmetricsAddr: 127.0.0.1:9000\nleaderElect: false\n",
        )
        .unwrap();
        let settings = parse(&["--config", file.to_str().unwrap(), "--concurrency", "5"])
            .resolve()
            .unwrap();
        assert_eq!(settings.controller.default_project.as_deref(), Some("from-file"));
        assert_eq!(settings.controller.concurrency, 5, "the flag wins over the file");
        assert_eq!(settings.controller.poll_active, Duration::from_millis(750));
        assert_eq!(
            settings.controller.poll_stable,
            ControllerConfig::default().poll_stable
        );
        assert_eq!(settings.metrics_addr, "127.0.0.1:9000".parse().unwrap());
        assert!(settings.leader.is_none());
    }

    #[test]
    fn the_kueue_default_queue_needs_kueue_and_a_queue_name() {
        let on = parse(&["--kueue", "--kueue-default-queue", "default"])
            .resolve()
            .unwrap()
            .controller;
        assert_eq!(on.kueue_default_queue.as_deref(), Some("default"));
        assert_eq!(parse(&[]).resolve().unwrap().controller.kueue_default_queue, None);
        let off = parse(&["--kueue-default-queue", "default"])
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(off.contains("set kueue: true"), "{off}");
        let bad = parse(&["--kueue", "--kueue-default-queue", "Team_A"])
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(
            bad.contains("kueueDefaultQueue: \"Team_A\" is not a LocalQueue name"),
            "{bad}"
        );
    }

    #[test]
    fn the_cloud_watch_is_on_by_default_and_configurable() {
        let defaults = parse(&[]).resolve().unwrap().controller;
        assert!(defaults.watch_lists);
        assert_eq!(defaults.poll_watched, Duration::from_secs(300));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("operator.yaml");
        std::fs::write(&file, "watchLists: false\npollWatched: 2m\n").unwrap();
        let from_file = parse(&["--config", file.to_str().unwrap()])
            .resolve()
            .unwrap()
            .controller;
        assert!(!from_file.watch_lists);
        assert_eq!(from_file.poll_watched, Duration::from_secs(120));
        let flags = parse(&[
            "--config",
            file.to_str().unwrap(),
            "--watch-lists",
            "--poll-watched",
            "90s",
        ])
        .resolve()
        .unwrap()
        .controller;
        assert!(flags.watch_lists);
        assert_eq!(flags.poll_watched, Duration::from_secs(90));
    }

    #[test]
    fn unknown_file_keys_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("operator.yaml");
        std::fs::write(&file, "concurency: 3\n").unwrap();
        let err = parse(&["--config", file.to_str().unwrap()])
            .resolve()
            .unwrap_err();
        assert!(format!("{err:#}").contains("concurency"), "{err:#}");
    }

    #[test]
    fn prices_and_the_policy_default_come_from_the_file_and_tenancy_is_refused_with_directions() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("operator.yaml");
        std::fs::write(
            &file,
            "namespacesWithoutPolicy: Deny\nprices:\n  tpuChipHourUsd: {v6e: {onDemand: 3.0, spot: 1.0}}\n",
        )
        .unwrap();
        let settings = parse(&["--config", file.to_str().unwrap()]).resolve().unwrap();
        assert_eq!(settings.namespaces_without_policy, WithoutPolicy::Deny);
        let shape = tpu_operator_api::accelerator::parse_accelerator_type("v6e-8").unwrap();
        let (usd, _) = settings.prices.slice_per_hour(
            &shape,
            tpu_operator_controller::governance::pricing::CapacityKind::Spot,
        );
        assert_eq!(usd, 8.0);
        let flag = parse(&[
            "--config",
            file.to_str().unwrap(),
            "--namespaces-without-policy",
            "Allow",
        ]);
        assert_eq!(
            flag.resolve().unwrap().namespaces_without_policy,
            WithoutPolicy::Allow
        );

        std::fs::write(&file, "tenancy:\n  namespaces:\n    team-a: {maxChips: 8}\n").unwrap();
        let err = parse(&["--config", file.to_str().unwrap()])
            .resolve()
            .unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("TpuPolicy") && text.contains("convert-tenancy"),
            "{text}"
        );
    }

    #[test]
    fn orphan_sweeper_settings_and_where_it_looks() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("operator.yaml");
        std::fs::write(
            &file,
            "project: p0\norphans: delete\norphanGracePeriod: 20m\norphanZones: [us-east5-b]\norphanRegions: [europe-west4]\n",
        )
        .unwrap();
        let s = parse(&[
            "--config",
            file.to_str().unwrap(),
            "--orphan-sweep-interval",
            "1m",
        ])
        .resolve()
        .unwrap()
        .sweeper;
        assert_eq!(s.mode, Mode::Delete);
        assert_eq!(
            (s.grace, s.interval),
            (Duration::from_secs(1200), Duration::from_secs(60))
        );
        assert_eq!(s.projects, ["p0"]);
        assert_eq!(s.zones, ["us-east5-b"]);
        assert_eq!(s.regions, ["europe-west4", "us-east5"]);
        let d = parse(&[]).resolve().unwrap().sweeper;
        assert_eq!((d.mode, d.grace), (Mode::Report, Duration::from_secs(900)));
        std::fs::write(
            &file,
            "orphans: delete\norphanZones: [z-1]\norphanProjects: [q]\n",
        )
        .unwrap();
        let s = parse(&["--config", file.to_str().unwrap(), "--orphans", "off"])
            .resolve()
            .unwrap()
            .sweeper;
        assert_eq!(
            (s.mode, s.zones.as_slice(), s.projects.as_slice()),
            (Mode::Off, &["z-1".to_string()][..], &["q".to_string()][..])
        );
    }

    #[test]
    fn the_chart_schema_config_is_generated_from_these_types() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../charts/tpu-operator/values.schema.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let mut schema: serde_json::Value = serde_json::from_str(&text).unwrap();
        let generated = values_schema_config();
        if std::env::var_os("TPU_OPERATOR_BLESS").is_some() {
            schema["properties"]["config"] = generated;
            std::fs::write(&path, serde_json::to_string_pretty(&schema).unwrap() + "\n").unwrap();
            return;
        }
        assert_eq!(
            schema["properties"]["config"], generated,
            "charts/tpu-operator/values.schema.json's `config` differs from the config types; \
             regenerate it with `TPU_OPERATOR_BLESS=1 cargo test -p tpu-operator --bin tpu-operator config`"
        );
        // Nested settings are described, closed, and the chart-owned keys are not offered.
        let properties = &generated["properties"];
        for key in [
            "namespacesWithoutPolicy",
            "prices",
            "orphanZones",
            "orphanProjects",
            "orphanRegions",
        ] {
            assert!(
                properties.get(key).is_some(),
                "{key} missing from the chart schema"
            );
        }
        for key in CHART_OWNED_KEYS {
            assert!(
                properties.get(key).is_none(),
                "{key} must be set by the chart only"
            );
        }
        assert!(
            properties.get("tenancy").is_none(),
            "tenancy: is refused, not offered"
        );
        assert_eq!(generated["additionalProperties"], false);
    }

    #[test]
    fn orphan_deletion_is_refused_with_a_shared_cluster_id() {
        let err = parse(&["--orphans", "delete", "--cluster-id", "default"])
            .resolve()
            .unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("clusterId") && msg.contains("config.clusterId"),
            "{msg}"
        );
        // Unset: the kube-system UID is unique, so delete is allowed; an explicit unique id too.
        let unset = parse(&["--orphans", "delete"]).resolve().unwrap();
        assert_eq!(unset.cluster_id, ClusterIdSource::KubeSystemUid);
        let empty = parse(&["--cluster-id", ""]).resolve().unwrap();
        assert_eq!(empty.cluster_id, ClusterIdSource::KubeSystemUid);
        let given = parse(&["--orphans", "delete", "--cluster-id", "prod-eu-1"])
            .resolve()
            .unwrap();
        assert_eq!(given.controller.cluster_id, "prod-eu-1");
    }

    #[test]
    fn emulator_url_and_lease_settings() {
        let settings = parse(&[
            "--gcp-emulator",
            "http://127.0.0.1:8085",
            "--lease-duration",
            "3s",
            "--identity",
            "a",
            "--namespace",
            "team-a",
        ])
        .resolve()
        .unwrap();
        assert_eq!(settings.gcp.resolve().tpu, "http://127.0.0.1:8085/tpu");
        let leader = settings.leader.unwrap();
        assert_eq!((leader.duration_secs, leader.identity.as_str()), (3, "a"));
        assert_eq!(settings.controller.namespace.as_deref(), Some("team-a"));
        let err = parse(&["--lease-duration", "1s"]).resolve().unwrap_err();
        assert!(err.to_string().contains("lease-duration"), "{err}");
    }
}
