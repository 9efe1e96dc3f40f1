//! Settings of `tpu-operator run`: command-line flags, each with a `TPU_OPERATOR_*` environment
//! fallback, over an optional YAML file (`--config`), over built-in defaults.
//!
//! Every flag is an `Option` without a clap default, so "not given" is visible and the file can
//! fill it in; defaults are applied last, in [`RunArgs::resolve`].

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use serde::Deserialize;
use tpu_operator_controller::{
    ControllerConfig,
    pricing::{PriceOverrides, PriceTable},
    sweeper::{Mode, SweeperConfig},
    tenancy::TenancyPolicy,
};

/// What the orphan sweeper does with cloud resources whose owning object is gone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize)]
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
use tpu_operator_gcp::GcpConfig;

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// Flags of `tpu-operator run`.
#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    /// YAML file with any of the settings below (camelCase keys, e.g. `metricsAddr`); flags and
    /// environment variables override it.
    #[arg(long, env = "TPU_OPERATOR_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Kubeconfig to use (default: in-cluster service account, else `$KUBECONFIG` / ~/.kube/config).
    #[arg(long, env = "TPU_OPERATOR_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Google Cloud project for objects that do not name one.
    #[arg(long, env = "TPU_OPERATOR_PROJECT")]
    pub project: Option<String>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "TPU_OPERATOR_NAMESPACE")]
    pub namespace: Option<String>,
    /// Point every GCP service at a gcp-emulator base URL (anonymous credentials).
    #[arg(long, env = "TPU_OPERATOR_GCP_EMULATOR", value_name = "URL")]
    pub gcp_emulator: Option<String>,
    /// Cloud TPU API endpoint.
    #[arg(long, env = "TPU_OPERATOR_TPU_ENDPOINT", value_name = "URL")]
    pub tpu_endpoint: Option<String>,
    /// Dataproc API endpoint.
    #[arg(long, env = "TPU_OPERATOR_DATAPROC_ENDPOINT", value_name = "URL")]
    pub dataproc_endpoint: Option<String>,
    /// Vertex AI endpoint; `{region}` is replaced by the resource's region.
    #[arg(long, env = "TPU_OPERATOR_VERTEX_ENDPOINT", value_name = "URL")]
    pub vertex_endpoint: Option<String>,
    /// Cloud Storage JSON API endpoint.
    #[arg(long, env = "TPU_OPERATOR_STORAGE_ENDPOINT", value_name = "URL")]
    pub storage_endpoint: Option<String>,
    /// Upper bound on one GCP HTTP call [default: 30s].
    #[arg(long, env = "TPU_OPERATOR_GCP_CALL_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    pub gcp_call_timeout: Option<Duration>,
    /// Reconciles run at once per controller [default: 16].
    #[arg(long, env = "TPU_OPERATOR_CONCURRENCY")]
    pub concurrency: Option<u16>,
    /// Requeue interval while cloud state changes [default: 2s].
    #[arg(long, env = "TPU_OPERATOR_POLL_ACTIVE", value_name = "DURATION", value_parser = parse_duration)]
    pub poll_active: Option<Duration>,
    /// Requeue interval while nothing is expected to change [default: 5m].
    #[arg(long, env = "TPU_OPERATOR_POLL_STABLE", value_name = "DURATION", value_parser = parse_duration)]
    pub poll_stable: Option<Duration>,
    /// Requeue interval while waiting for TPU capacity [default: 30s].
    #[arg(long, env = "TPU_OPERATOR_POLL_CAPACITY", value_name = "DURATION", value_parser = parse_duration)]
    pub poll_capacity: Option<Duration>,
    /// Watch cloud state changes with one paged `list` per collection and location instead of a
    /// read per waiting object every --poll-active (`--watch-lists=false` needs no `list`
    /// permission) [default: true].
    #[arg(long, env = "TPU_OPERATOR_WATCH_LISTS", num_args = 0..=1, default_missing_value = "true")]
    pub watch_lists: Option<bool>,
    /// Backstop read interval of an object whose cloud resource the list watch covers
    /// [default: 5m].
    #[arg(long, env = "TPU_OPERATOR_POLL_WATCHED", value_name = "DURATION", value_parser = parse_duration)]
    pub poll_watched: Option<Duration>,
    /// Cluster id written to the `tpu-operator-cluster` label of every cloud object, so clusters
    /// sharing a project never touch each other's resources [default: default].
    #[arg(long, env = "TPU_OPERATOR_CLUSTER_ID")]
    pub cluster_id: Option<String>,
    /// Address of the /metrics, /healthz and /readyz server [default: 0.0.0.0:8080].
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
    pub lease_name: Option<String>,
    /// Namespace of the Lease (default: `$POD_NAMESPACE`, else the watched namespace, else `default`).
    #[arg(long, env = "TPU_OPERATOR_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// How long a lease is valid without renewal: a standby takes over this long after the leader
    /// stops renewing (whole seconds, at least 2s) [default: 15s].
    #[arg(long, env = "TPU_OPERATOR_LEASE_DURATION", value_name = "DURATION", value_parser = parse_duration)]
    pub lease_duration: Option<Duration>,
    /// Identity of this replica in the Lease (default: `$POD_NAME`, else `$HOSTNAME-<pid>`).
    #[arg(long, env = "TPU_OPERATOR_IDENTITY")]
    pub identity: Option<String>,
    /// How long graceful shutdown waits for in-flight reconciles [default: 30s].
    #[arg(long, env = "TPU_OPERATOR_SHUTDOWN_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    pub shutdown_timeout: Option<Duration>,
    /// Orphan sweeper: cloud resources labelled with this cluster's id whose owning object no
    /// longer exists are reported, or also deleted after --orphan-grace-period [default: report].
    /// Where it looks: `orphanProjects` / `orphanZones` / `orphanRegions` in the config file
    /// (default: the default projects and the zones / regions named by the tenancy policy).
    #[arg(long, env = "TPU_OPERATOR_ORPHANS", value_enum)]
    pub orphans: Option<OrphanMode>,
    /// How long a resource must have been orphaned before --orphans=delete deletes it [default: 15m].
    #[arg(long, env = "TPU_OPERATOR_ORPHAN_GRACE_PERIOD", value_name = "DURATION", value_parser = parse_duration)]
    pub orphan_grace_period: Option<Duration>,
    /// Time between orphan sweeps [default: 10m].
    #[arg(long, env = "TPU_OPERATOR_ORPHAN_SWEEP_INTERVAL", value_name = "DURATION", value_parser = parse_duration)]
    pub orphan_sweep_interval: Option<Duration>,
}

/// The same settings as a YAML file (`--config`). Unknown keys are errors, so typos surface.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileConfig {
    kubeconfig: Option<PathBuf>,
    project: Option<String>,
    namespace: Option<String>,
    gcp_emulator: Option<String>,
    tpu_endpoint: Option<String>,
    dataproc_endpoint: Option<String>,
    vertex_endpoint: Option<String>,
    storage_endpoint: Option<String>,
    #[serde(default, with = "humantime_serde_opt")]
    gcp_call_timeout: Option<Duration>,
    concurrency: Option<u16>,
    #[serde(default, with = "humantime_serde_opt")]
    poll_active: Option<Duration>,
    #[serde(default, with = "humantime_serde_opt")]
    poll_stable: Option<Duration>,
    #[serde(default, with = "humantime_serde_opt")]
    poll_capacity: Option<Duration>,
    watch_lists: Option<bool>,
    #[serde(default, with = "humantime_serde_opt")]
    poll_watched: Option<Duration>,
    cluster_id: Option<String>,
    metrics_addr: Option<SocketAddr>,
    log_format: Option<LogFormat>,
    leader_elect: Option<bool>,
    lease_name: Option<String>,
    lease_namespace: Option<String>,
    #[serde(default, with = "humantime_serde_opt")]
    lease_duration: Option<Duration>,
    identity: Option<String>,
    #[serde(default, with = "humantime_serde_opt")]
    shutdown_timeout: Option<Duration>,
    /// Per-namespace tenancy policy (docs/policy.md). File only: too structured for a flag.
    #[serde(default)]
    tenancy: TenancyPolicy,
    /// Price overrides (docs/cost-model.md). File only.
    #[serde(default)]
    prices: PriceOverrides,
    orphans: Option<OrphanMode>,
    #[serde(default, with = "humantime_serde_opt")]
    orphan_grace_period: Option<Duration>,
    #[serde(default, with = "humantime_serde_opt")]
    orphan_sweep_interval: Option<Duration>,
    /// Where the sweeper looks (file only).
    #[serde(default)]
    orphan_projects: Vec<String>,
    #[serde(default)]
    orphan_zones: Vec<String>,
    #[serde(default)]
    orphan_regions: Vec<String>,
}

/// Durations in the YAML file are humantime strings (`90s`, `5m`), like the flags.
mod humantime_serde_opt {
    use serde::{Deserialize, Deserializer, de::Error};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| humantime::parse_duration(&s).map_err(|e| D::Error::custom(format!("{s:?}: {e}"))))
            .transpose()
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 2s or 5m: {e}"))
}

/// Leader-election settings.
#[derive(Debug, Clone)]
pub struct LeaderSettings {
    pub lease_name: String,
    pub lease_namespace: String,
    pub identity: String,
    /// Whole seconds, as the Lease API counts them.
    pub duration_secs: u64,
}

/// Everything `run` needs, after merging flags, environment, file and defaults.
#[derive(Debug, Clone)]
pub struct Settings {
    pub kubeconfig: Option<PathBuf>,
    pub controller: ControllerConfig,
    pub gcp: GcpConfig,
    pub metrics_addr: SocketAddr,
    pub log_format: LogFormat,
    /// `None`: leader election disabled, this replica always runs the controllers.
    pub leader: Option<LeaderSettings>,
    pub shutdown_timeout: Duration,
    /// Tenancy policy from the config file (empty: everything allowed).
    pub tenancy: TenancyPolicy,
    /// Price table: built-in list prices with the config file's overrides.
    pub prices: PriceTable,
    pub sweeper: SweeperConfig,
}

macro_rules! merge {
    ($flags:expr, $file:expr, $($field:ident),+ $(,)?) => {
        $( if $flags.$field.is_none() { $flags.$field = $file.$field.take(); } )+
    };
}

impl RunArgs {
    /// Applies the `--config` file (if any) under the flags, then the defaults.
    pub fn resolve(mut self) -> anyhow::Result<Settings> {
        let mut tenancy = TenancyPolicy::default();
        let mut prices = PriceOverrides::default();
        let mut places: [Vec<String>; 3] = Default::default();
        if let Some(path) = self.config.clone() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading the config file {}", path.display()))?;
            let mut file: FileConfig = serde_yaml::from_str(&text)
                .with_context(|| format!("parsing the config file {}", path.display()))?;
            merge!(
                self,
                file,
                kubeconfig,
                project,
                namespace,
                gcp_emulator,
                tpu_endpoint,
                dataproc_endpoint,
                vertex_endpoint,
                storage_endpoint,
                gcp_call_timeout,
                concurrency,
                poll_active,
                poll_stable,
                poll_capacity,
                watch_lists,
                poll_watched,
                cluster_id,
                metrics_addr,
                log_format,
                leader_elect,
                lease_name,
                lease_namespace,
                lease_duration,
                identity,
                shutdown_timeout,
                orphans,
                orphan_grace_period,
                orphan_sweep_interval,
            );
            places = [
                std::mem::take(&mut file.orphan_projects),
                std::mem::take(&mut file.orphan_zones),
                std::mem::take(&mut file.orphan_regions),
            ];
            tenancy = std::mem::take(&mut file.tenancy);
            prices = std::mem::take(&mut file.prices);
        }
        let mut settings = self.into_settings()?;
        tenancy
            .validate()
            .map_err(|e| anyhow::anyhow!("config file: {e}"))?;
        settings.prices =
            PriceTable::with_overrides(&prices).map_err(|e| anyhow::anyhow!("config file: {e}"))?;
        let [projects, zones, regions] = places;
        settings.sweeper = sweep_places(
            settings.sweeper,
            &settings.controller,
            &tenancy,
            projects,
            zones,
            regions,
        );
        settings.tenancy = tenancy;
        Ok(settings)
    }

    fn into_settings(self) -> anyhow::Result<Settings> {
        let defaults = ControllerConfig::default();
        let controller = ControllerConfig {
            cluster_id: self.cluster_id.unwrap_or(defaults.cluster_id),
            namespace: self.namespace.clone(),
            concurrency: self.concurrency.unwrap_or(defaults.concurrency),
            default_project: self.project,
            poll_active: self.poll_active.unwrap_or(defaults.poll_active),
            poll_stable: self.poll_stable.unwrap_or(defaults.poll_stable),
            poll_capacity: self.poll_capacity.unwrap_or(defaults.poll_capacity),
            watch_lists: self.watch_lists.unwrap_or(defaults.watch_lists),
            poll_watched: self.poll_watched.unwrap_or(defaults.poll_watched),
        };
        if controller.concurrency == 0 {
            bail!("concurrency: must be at least 1");
        }
        let mut gcp = match &self.gcp_emulator {
            Some(url) => GcpConfig::emulator(
                url.parse()
                    .with_context(|| format!("gcp-emulator: {url:?} is not a URL"))?,
            ),
            None => GcpConfig::production(),
        };
        if let Some(e) = self.tpu_endpoint {
            gcp.tpu_endpoint = e;
        }
        if let Some(e) = self.dataproc_endpoint {
            gcp.dataproc_endpoint = e;
        }
        if let Some(e) = self.vertex_endpoint {
            gcp.vertex_endpoint = e;
        }
        if let Some(e) = self.storage_endpoint {
            gcp.storage_endpoint = e;
        }
        if let Some(t) = self.gcp_call_timeout {
            gcp.call_timeout = t;
        }
        let sweeper = SweeperConfig {
            mode: match self.orphans.unwrap_or_default() {
                OrphanMode::Off => Mode::Off,
                OrphanMode::Report => Mode::Report,
                OrphanMode::Delete => Mode::Delete,
            },
            grace: self.orphan_grace_period.unwrap_or(Duration::from_secs(15 * 60)),
            interval: self.orphan_sweep_interval.unwrap_or(Duration::from_secs(10 * 60)),
            report_namespace: std::env::var("POD_NAMESPACE")
                .ok()
                .or_else(|| self.namespace.clone())
                .unwrap_or_else(|| "default".into()),
            ..SweeperConfig::default()
        };
        let leader = if self.leader_elect.unwrap_or(true) {
            let duration_secs = self.lease_duration.unwrap_or(Duration::from_secs(15)).as_secs();
            if duration_secs < 2 {
                bail!("lease-duration: must be at least 2s (the lease is renewed 1s before it expires)");
            }
            Some(LeaderSettings {
                lease_name: self.lease_name.unwrap_or_else(|| "tpu-operator".into()),
                lease_namespace: self
                    .lease_namespace
                    .or_else(|| std::env::var("POD_NAMESPACE").ok())
                    .or(self.namespace)
                    .unwrap_or_else(|| "default".into()),
                identity: self.identity.unwrap_or_else(default_identity),
                duration_secs,
            })
        } else {
            None
        };
        Ok(Settings {
            kubeconfig: self.kubeconfig,
            controller,
            gcp,
            metrics_addr: self
                .metrics_addr
                .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 8080))),
            log_format: self.log_format.unwrap_or_default(),
            leader,
            shutdown_timeout: self.shutdown_timeout.unwrap_or(Duration::from_secs(30)),
            tenancy: TenancyPolicy::default(),
            prices: PriceTable::default(),
            sweeper,
        })
    }
}

/// Where the sweeper looks: the configured lists, else what the operator knows of: the default
/// projects and the exact (non-`*`) projects, zones and regions the tenancy policy names, plus the
/// regions of those zones.
fn sweep_places(
    mut sweeper: SweeperConfig,
    controller: &ControllerConfig,
    tenancy: &TenancyPolicy,
    projects: Vec<String>,
    zones: Vec<String>,
    regions: Vec<String>,
) -> SweeperConfig {
    use std::collections::BTreeSet;
    let policies: Vec<_> = tenancy
        .namespaces
        .values()
        .chain(tenancy.default.as_ref())
        .collect();
    let exact = |lists: Vec<&Vec<String>>| -> BTreeSet<String> {
        lists
            .into_iter()
            .flatten()
            .filter(|v| !v.ends_with('*'))
            .cloned()
            .collect()
    };
    let projects = if projects.is_empty() {
        let mut p = exact(
            policies
                .iter()
                .filter_map(|p| p.allowed_projects.as_ref())
                .collect(),
        );
        p.extend(policies.iter().filter_map(|p| p.default_project.clone()));
        p.extend(controller.default_project.clone());
        p.into_iter().collect()
    } else {
        projects
    };
    let zones = if zones.is_empty() {
        exact(policies.iter().filter_map(|p| p.allowed_zones.as_ref()).collect())
            .into_iter()
            .collect()
    } else {
        zones
    };
    let regions = if regions.is_empty() {
        let mut r = exact(
            policies
                .iter()
                .filter_map(|p| p.allowed_regions.as_ref())
                .collect(),
        );
        r.extend(
            zones
                .iter()
                .map(|z| tpu_operator_controller::tenancy::request::region_of_zone(z).to_owned()),
        );
        r.into_iter().collect()
    } else {
        regions
    };
    sweeper.projects = projects;
    sweeper.zones = zones;
    sweeper.regions = regions;
    sweeper
}

/// `$POD_NAME` (set from the downward API in the chart), else `$HOSTNAME-<pid>` so two local
/// replicas on one machine still differ.
fn default_identity() -> String {
    std::env::var("POD_NAME").unwrap_or_else(|_| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "tpu-operator".into());
        format!("{host}-{}", std::process::id())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

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
    fn tenancy_and_prices_come_from_the_file_and_are_validated() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("operator.yaml");
        std::fs::write(
            &file,
            "tenancy:\n  namespaces:\n    team-a: {defaultProject: a-proj, allowedCapacity: [spot], maxChips: 8}\n  default: {allowedProjects: []}\nprices:\n  tpuChipHourUsd: {v6e: {onDemand: 3.0, spot: 1.0}}\n",
        )
        .unwrap();
        let settings = parse(&["--config", file.to_str().unwrap()]).resolve().unwrap();
        assert_eq!(settings.tenancy.default_project("team-a"), Some("a-proj"));
        assert_eq!(settings.tenancy.namespaces["team-a"].max_chips, Some(8));
        let shape = tpu_operator_api::accelerator::parse_accelerator_type("v6e-8").unwrap();
        let (usd, _) = settings
            .prices
            .slice_per_hour(&shape, tpu_operator_controller::pricing::CapacityKind::Spot);
        assert_eq!(usd, 8.0);

        std::fs::write(
            &file,
            "tenancy:\n  namespaces:\n    team-a: {allowedAccelerators: [{family: v7x}]}\n",
        )
        .unwrap();
        let err = parse(&["--config", file.to_str().unwrap()])
            .resolve()
            .unwrap_err();
        assert!(
            format!("{err:#}").contains("tenancy.namespaces.team-a.allowedAccelerators"),
            "{err:#}"
        );
        std::fs::write(&file, "tenancy:\n  namespaces:\n    team-a: {maxChip: 8}\n").unwrap();
        let err = parse(&["--config", file.to_str().unwrap()])
            .resolve()
            .unwrap_err();
        assert!(format!("{err:#}").contains("maxChip"), "{err:#}");
    }

    #[test]
    fn orphan_sweeper_settings_and_where_it_looks() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("operator.yaml");
        std::fs::write(
            &file,
            "project: p0\norphans: delete\norphanGracePeriod: 20m\ntenancy:\n  namespaces:\n    a: {defaultProject: p1, allowedZones: [us-east5-b, us-central2-*], allowedRegions: [europe-west4]}\n",
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
        assert_eq!(s.projects, ["p0", "p1"]);
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
