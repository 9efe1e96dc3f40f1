//! Resolving `tpu-operator run`'s settings: the `--config` file under the flags, then the
//! defaults, into the [`Settings`] `run` starts from.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::{Context as _, bail};
use tpu_operator_controller::{
    ControllerConfig,
    governance::{pricing::PriceTable, tenancy::WithoutPolicy},
    runtime::capacity::Limits,
    sweeper::{Mode, SweeperConfig},
};
use tpu_operator_gcp::GcpConfig;

use super::{LogFormat, OrphanMode, RunArgs};

/// Cluster ids several clusters are likely to share (an old default, the `local` mode's id):
/// `orphans: delete` with one of them would delete other clusters' live TPUs as orphans.
const SHARED_CLUSTER_IDS: [&str; 2] = ["default", "local"];

/// Where this process's cluster id comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterIdSource {
    /// `clusterId` was set.
    Given(String),
    /// Not set: the `kube-system` Namespace's UID, read at start-up (see `run`).
    KubeSystemUid,
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
    /// `controller.cluster_id` is empty until `run` resolves [`Settings::cluster_id`].
    pub controller: ControllerConfig,
    pub cluster_id: ClusterIdSource,
    pub gcp: GcpConfig,
    pub metrics_addr: SocketAddr,
    pub log_format: LogFormat,
    /// `None`: leader election disabled, this replica always runs the controllers.
    pub leader: Option<LeaderSettings>,
    pub shutdown_timeout: Duration,
    /// What namespaces no TpuPolicy selects may do.
    pub namespaces_without_policy: WithoutPolicy,
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
        if let Some(path) = self.config.clone() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading the config file {}", path.display()))?;
            let file: RunArgs = serde_yaml::from_str(&text)
                .with_context(|| format!("parsing the config file {}", path.display()))?;
            self.fill_from(file);
        }
        self.into_settings()
    }

    /// What the flags left unset comes from the file; the file-only settings always do.
    fn fill_from(&mut self, mut file: RunArgs) {
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
            compute_endpoint,
            logging_endpoint,
            gcp_call_timeout,
            concurrency,
            poll_active,
            poll_stable,
            poll_capacity,
            watch_lists,
            kueue,
            kueue_default_queue,
            poll_watched,
            poll_checkpoints,
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
            namespaces_without_policy,
        );
        self.orphan_projects = file.orphan_projects;
        self.orphan_zones = file.orphan_zones;
        self.orphan_regions = file.orphan_regions;
        self.tenancy = file.tenancy;
        self.create_limits = file.create_limits;
        self.prices = file.prices;
    }

    fn into_settings(self) -> anyhow::Result<Settings> {
        let cluster_id = self.cluster_id_source();
        let controller = self.controller(&cluster_id)?;
        let gcp = self.gcp()?;
        let mode = self.orphan_mode(&cluster_id)?;
        self.refuse_tenancy()?;
        let prices =
            PriceTable::with_overrides(&self.prices).map_err(|e| anyhow::anyhow!("config file: {e}"))?;
        let leader = self.leader()?;
        let sweeper = self.sweeper(mode, &controller);
        Ok(Settings {
            kubeconfig: self.kubeconfig,
            controller,
            cluster_id,
            gcp,
            metrics_addr: self.metrics_addr.unwrap_or(crate::server::DEFAULT_ADDR),
            log_format: self.log_format.unwrap_or_default(),
            leader,
            shutdown_timeout: self.shutdown_timeout.unwrap_or(Duration::from_secs(30)),
            namespaces_without_policy: self.namespaces_without_policy.unwrap_or_default(),
            prices,
            sweeper,
        })
    }

    /// The configured cluster id, or (unset or empty) the `kube-system` Namespace's UID.
    fn cluster_id_source(&self) -> ClusterIdSource {
        match self.cluster_id.clone().filter(|id| !id.is_empty()) {
            Some(id) => ClusterIdSource::Given(id),
            None => ClusterIdSource::KubeSystemUid,
        }
    }

    /// The controllers' settings, each defaulting to [`ControllerConfig::default`]'s.
    fn controller(&self, cluster_id: &ClusterIdSource) -> anyhow::Result<ControllerConfig> {
        let defaults = ControllerConfig::default();
        let controller = ControllerConfig {
            cluster_id: match cluster_id {
                ClusterIdSource::Given(id) => id.clone(),
                ClusterIdSource::KubeSystemUid => String::new(),
            },
            namespace: self.namespace.clone(),
            concurrency: self.concurrency.unwrap_or(defaults.concurrency),
            default_project: self.project.clone(),
            poll_active: self.poll_active.unwrap_or(defaults.poll_active),
            poll_stable: self.poll_stable.unwrap_or(defaults.poll_stable),
            poll_capacity: self.poll_capacity.unwrap_or(defaults.poll_capacity),
            watch_lists: self.watch_lists.unwrap_or(defaults.watch_lists),
            poll_watched: self.poll_watched.unwrap_or(defaults.poll_watched),
            poll_checkpoints: self.poll_checkpoints.unwrap_or(defaults.poll_checkpoints),
            kueue: self.kueue.unwrap_or(defaults.kueue),
            kueue_default_queue: self.kueue_default_queue.clone(),
            create_limits: self.create_limits()?,
            cloud_time_scale: defaults.cloud_time_scale,
        };
        if controller.concurrency == 0 {
            bail!("concurrency: must be at least 1");
        }
        if let Some(queue) = &controller.kueue_default_queue {
            check_queue_name(queue)?;
            if !controller.kueue {
                bail!(
                    "kueueDefaultQueue ({queue}) gates objects through Kueue, which is off: set kueue: true \
                     (chart kueue.enabled) or remove kueueDefaultQueue"
                );
            }
        }
        Ok(controller)
    }

    /// The default quotas, then the config file's `createLimits`, then the `--create-limit`
    /// flags.
    fn create_limits(&self) -> anyhow::Result<Limits> {
        let mut limits = Limits::default();
        let file = self.create_limits.iter().map(|(group, n)| format!("{group}={n}"));
        for setting in file.chain(self.create_limit.iter().cloned()) {
            limits.set(&setting).map_err(anyhow::Error::msg)?;
        }
        Ok(limits)
    }

    /// The config file's old `tenancy:` section is refused, with directions to TpuPolicy objects.
    fn refuse_tenancy(&self) -> anyhow::Result<()> {
        if self.tenancy.is_some() {
            bail!(
                "config file: the `tenancy:` section is replaced by TpuPolicy objects (cluster-scoped, \
                 one source of truth that tenants can read). `tpu-operator convert-tenancy --config <file>` \
                 prints the equivalent TpuPolicy manifests; `kubectl apply` them, then remove `tenancy:` \
                 (docs/policy.md, \"Migrating from the config file\")"
            );
        }
        Ok(())
    }

    /// The orphan sweeper: its mode, grace period and interval, where it reports, and where it
    /// looks.
    fn sweeper(&self, mode: Mode, controller: &ControllerConfig) -> SweeperConfig {
        sweep_places(
            SweeperConfig {
                mode,
                grace: self.orphan_grace_period.unwrap_or(Duration::from_secs(15 * 60)),
                interval: self.orphan_sweep_interval.unwrap_or(Duration::from_secs(10 * 60)),
                report_namespace: std::env::var("POD_NAMESPACE")
                    .ok()
                    .or_else(|| self.namespace.clone())
                    .unwrap_or_else(|| "default".into()),
                ..SweeperConfig::default()
            },
            controller,
            self.orphan_projects.clone(),
            self.orphan_zones.clone(),
            self.orphan_regions.clone(),
        )
    }

    /// The Google Cloud endpoints (production, or the emulator, each overridable) and call timeout.
    fn gcp(&self) -> anyhow::Result<GcpConfig> {
        let mut gcp = match &self.gcp_emulator {
            Some(url) => GcpConfig::emulator(
                url.parse()
                    .with_context(|| format!("gcp-emulator: {url:?} is not a URL"))?,
            ),
            None => GcpConfig::production(),
        };
        for (value, endpoint) in [
            (&self.tpu_endpoint, &mut gcp.tpu_endpoint),
            (&self.dataproc_endpoint, &mut gcp.dataproc_endpoint),
            (&self.vertex_endpoint, &mut gcp.vertex_endpoint),
            (&self.storage_endpoint, &mut gcp.storage_endpoint),
            (&self.compute_endpoint, &mut gcp.compute_endpoint),
            (&self.logging_endpoint, &mut gcp.logging_endpoint),
        ] {
            if let Some(e) = value {
                endpoint.clone_from(e);
            }
        }
        if let Some(t) = self.gcp_call_timeout {
            gcp.call_timeout = t;
        }
        Ok(gcp)
    }

    /// The orphan sweeper's mode; `delete` is refused with a cluster id other clusters may share.
    fn orphan_mode(&self, cluster_id: &ClusterIdSource) -> anyhow::Result<Mode> {
        let mode = match self.orphans.unwrap_or_default() {
            OrphanMode::Off => Mode::Off,
            OrphanMode::Report => Mode::Report,
            OrphanMode::Delete => Mode::Delete,
        };
        if let (Mode::Delete, ClusterIdSource::Given(id)) = (mode, cluster_id)
            && SHARED_CLUSTER_IDS.contains(&id.as_str())
        {
            bail!(
                "orphans: `delete` needs a cluster id unique to this cluster, and clusterId is {id:?}, \
                 a value other clusters may share: each would delete the others' live TPUs as orphans. \
                 Set clusterId (flag --cluster-id, config key clusterId, Helm value config.clusterId) \
                 to a value unique among the clusters using these projects, or leave it unset to use \
                 this cluster's kube-system Namespace UID"
            );
        }
        Ok(mode)
    }

    /// Leader election (on unless `--leader-elect=false`): the lease and who this replica is.
    fn leader(&self) -> anyhow::Result<Option<LeaderSettings>> {
        Ok(if self.leader_elect.unwrap_or(true) {
            let duration_secs = self.lease_duration.unwrap_or(Duration::from_secs(15)).as_secs();
            if duration_secs < 2 {
                bail!(
                    "lease-duration: must be at least 2s (the leader renews every 2/15 of it and \
                     stops leading 2/3 of it after its last renewal)"
                );
            }
            Some(LeaderSettings {
                lease_name: self.lease_name.clone().unwrap_or_else(|| "tpu-operator".into()),
                lease_namespace: self
                    .lease_namespace
                    .clone()
                    .or_else(|| std::env::var("POD_NAMESPACE").ok())
                    .or_else(|| self.namespace.clone())
                    .unwrap_or_else(|| "default".into()),
                identity: self.identity.clone().unwrap_or_else(default_identity),
                duration_secs,
            })
        } else {
            None
        })
    }
}

/// Where the sweeper looks besides the places the custom resources use or have used (which it
/// learns itself): the configured lists, else the default project; regions also cover the
/// configured zones.
fn sweep_places(
    mut sweeper: SweeperConfig,
    controller: &ControllerConfig,
    projects: Vec<String>,
    zones: Vec<String>,
    mut regions: Vec<String>,
) -> SweeperConfig {
    let projects = if projects.is_empty() {
        controller.default_project.iter().cloned().collect()
    } else {
        projects
    };
    for zone in &zones {
        let region = tpu_operator_controller::governance::tenancy::request::region_of_zone(zone).to_owned();
        if !regions.contains(&region) {
            regions.push(region);
        }
    }
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

/// A LocalQueue name is a DNS subdomain (Kubernetes object names): lowercase alphanumerics, `-`
/// and `.`, starting and ending alphanumeric, at most 253 characters.
fn check_queue_name(queue: &str) -> anyhow::Result<()> {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let valid = !queue.is_empty()
        && queue.len() <= 253
        && queue
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && edge(queue.chars().next())
        && edge(queue.chars().last());
    if !valid {
        bail!(
            "kueueDefaultQueue: {queue:?} is not a LocalQueue name (lowercase letters, digits, '-' and '.', \
             starting and ending with a letter or digit, at most 253 characters)"
        );
    }
    Ok(())
}
