//! `tpu-operator logs KIND/NAME`: the logs of what an object runs in Google Cloud, read from
//! Cloud Logging with the caller's own credentials, the way `kubectl logs` reads a pod's.
//!
//! The object (read with the caller's kubeconfig) says where its logs are ([`sources`]): a
//! pipeline's preprocess batch and its training (the Vertex AI custom job, or the workload
//! container on the TPU VM hosts), a PreprocessBatch's Dataproc batch, a TpuSlice's workload. The
//! lines are `entries.list` results ([`read`]), oldest first; `--follow` polls for newer ones
//! across preemptions and retries and ends when the object finishes or is deleted.

mod read;
mod sources;

use std::{path::PathBuf, time::Duration};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use tpu_operator_gcp::{Gcp, GcpConfig, GcpMetrics, LoggingClient};

use self::read::{Cursor, Printer};
use self::sources::Resolved;
use crate::object::{self, Kind, Object};

/// A pipeline's stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Stage {
    Preprocess,
    Train,
}

/// Flags of `tpu-operator logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// What to show the logs of: `trainingpipeline/NAME` (`tpl/NAME`), `tpuslice/NAME`
    /// (`tpus/NAME`) or `preprocessbatch/NAME` (`ppb/NAME`).
    pub object: String,
    /// The object's namespace [default: the kubeconfig context's].
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Keep printing new lines (across preemptions and retries) until the object finishes or is
    /// deleted.
    #[arg(short, long)]
    pub follow: bool,
    /// Only lines newer than this (e.g. 10m, 2h).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub since: Option<Duration>,
    /// Only the last N lines of each stream.
    #[arg(long, value_name = "N")]
    pub tail: Option<u32>,
    /// TrainingPipeline: only this stage [default: both, in order].
    #[arg(long, value_enum)]
    pub stage: Option<Stage>,
    /// TrainingPipeline: this training attempt (1-based) [default: the current one];
    /// PreprocessBatch: this batch attempt.
    #[arg(long, value_name = "N")]
    pub attempt: Option<u32>,
    /// Only this host of a multi-host slice (its TPU VM worker number, from 0).
    #[arg(long, value_name = "N")]
    pub host: Option<u32>,
    /// Print each line's time first.
    #[arg(long)]
    pub timestamps: bool,
    /// How often `--follow` asks for new lines.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// kubeconfig to read the object with [default: in-cluster or ~/.kube/config].
    #[arg(long, env = "TPU_OPERATOR_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Read the logs from a gcp-emulator at this base URL (anonymously).
    #[arg(long, env = "TPU_OPERATOR_GCP_EMULATOR", value_name = "URL")]
    pub gcp_emulator: Option<String>,
    /// Cloud Logging API base URL [default: the public one].
    #[arg(long, env = "TPU_OPERATOR_LOGGING_ENDPOINT", value_name = "URL")]
    pub logging_endpoint: Option<String>,
}

/// Entry point of `tpu-operator logs`.
pub async fn run(args: LogsArgs) -> anyhow::Result<()> {
    let object = Object::parse(&args.object, "logs")?;
    args.check_for(&object)?;
    let client = crate::run::kube_client(args.kubeconfig.as_deref()).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let logging = logging_client(&args).await?;
    let since = args
        .since
        .map(|d| chrono::Utc::now() - chrono::Duration::from_std(d).unwrap_or_default());
    let mut printer = Printer::new(args.timestamps);
    let mut cursors: Vec<Cursor> = Vec::new();
    let mut resolved = sources::resolve(&client, &namespace, &object, &args).await?;
    for note in &resolved.notes {
        eprintln!("{note}");
    }
    read::first(&logging, &resolved, since, args.tail, &mut cursors, &mut printer).await?;
    if !args.follow {
        if printer.printed() == 0 && resolved.notes.is_empty() {
            eprintln!("{}", nothing_yet(&resolved));
        }
        return Ok(());
    }
    follow(
        &client,
        &namespace,
        &object,
        &args,
        &logging,
        &mut resolved,
        &mut cursors,
        &mut printer,
    )
    .await
}

impl LogsArgs {
    /// Flags that only some kinds take are refused, naming the flag, for the others.
    fn check_for(&self, object: &Object) -> anyhow::Result<()> {
        if self.stage.is_some() && object.kind != Kind::TrainingPipeline {
            anyhow::bail!(
                "--stage: only a TrainingPipeline has stages ({} has one stream)",
                object.kind.name()
            );
        }
        if self.attempt == Some(0) {
            anyhow::bail!("--attempt: attempts count from 1");
        }
        if self.attempt.is_some() && object.kind == Kind::TpuSlice {
            anyhow::bail!("--attempt: a TpuSlice has no attempts (its recreations log into one stream)");
        }
        if self.interval.is_zero() {
            anyhow::bail!("--interval: must be greater than 0");
        }
        Ok(())
    }
}

/// `--follow`: new lines until the object finishes (one more read after that, for lines still
/// on their way) or is deleted.
#[allow(clippy::too_many_arguments)]
async fn follow(
    client: &kube::Client,
    namespace: &str,
    object: &Object,
    args: &LogsArgs,
    logging: &LoggingClient,
    resolved: &mut Resolved,
    cursors: &mut Vec<Cursor>,
    printer: &mut Printer,
) -> anyhow::Result<()> {
    let mut finishing = resolved.finished;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(args.interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        match sources::resolve(client, namespace, object, args).await {
            Ok(now) => *resolved = now,
            Err(e) if object::is_gone(&e) => {
                read::more(logging, resolved, cursors, printer).await?;
                eprintln!("{} was deleted; no more lines", object.display(namespace));
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        read::more(logging, resolved, cursors, printer).await?;
        if finishing {
            return Ok(());
        }
        finishing = resolved.finished;
    }
}

/// What to say when a read printed nothing.
fn nothing_yet(resolved: &Resolved) -> String {
    let names: Vec<&str> = resolved.streams.iter().map(|s| s.what.as_str()).collect();
    format!("no log entries yet for {}", names.join(" or "))
}

/// The Cloud Logging client: the emulator's, or the API's with Application Default Credentials.
async fn logging_client(args: &LogsArgs) -> anyhow::Result<LoggingClient> {
    let mut config = match &args.gcp_emulator {
        Some(url) => GcpConfig::emulator(
            url.parse()
                .with_context(|| format!("gcp-emulator: {url:?} is not a URL"))?,
        ),
        None => GcpConfig::production(),
    };
    if let Some(endpoint) = &args.logging_endpoint {
        config.logging_endpoint.clone_from(endpoint);
    }
    Gcp::connect_logging(config, GcpMetrics::new())
        .await
        .context("building the Cloud Logging client")
}
