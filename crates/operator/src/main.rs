//! The `tpu-operator` binary.
//!
//! Subcommands live in [`Command`]; each has its own module: `crds` prints the CRDs, `run` is the
//! operator in a cluster, `logs` prints what an object's cloud work logged, `capacity` shows the stockout memory and
//! what waits where, `local` runs everything (both emulators and the controllers) in one
//! process. `local` and the emulators it embeds are the default-on `local` cargo feature; a
//! production image is built with `--no-default-features` and leaves them out.

mod allocator;
mod build_info;
mod capacity;
mod config;
mod convert_tenancy;
mod crds;
mod crds_ready;
mod describe;
mod leader;
#[cfg(feature = "local")]
mod local;
mod logs;
mod migrate_storage;
mod object;
mod run;
mod server;
mod telemetry;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Kubernetes operator for Cloud TPU training pipelines.
#[derive(Debug, Parser)]
#[command(name = "tpu-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions as YAML (or write them to a directory).
    Crds(crds::CrdsArgs),
    /// Print the JSON schema of `run --config` files (every key, with its description).
    ConfigSchema,
    /// Print the TpuPolicy manifests equivalent to an old config file's `tenancy:` section.
    ConvertTenancy(convert_tenancy::ConvertArgs),
    /// Rewrite every stored TpuSlice, PreprocessBatch, TrainingPipeline and TpuPolicy in its CRD's
    /// storage version and trim the CRDs' `status.storedVersions` (docs/api-versions.md).
    MigrateStorage(migrate_storage::MigrateArgs),
    /// Run the operator against a Kubernetes cluster (in-cluster config or a kubeconfig).
    Run(Box<config::RunArgs>),
    /// Print the logs of what an object runs in Google Cloud (its Dataproc batch, Vertex AI job
    /// or TPU VM workload), from Cloud Logging: `tpu-operator logs tpl/NAME [-f]`.
    Logs(logs::LogsArgs),
    /// One screen about a pipeline, slice or batch: phase and what it waits for, attempts,
    /// stages with their times, cost, checkpoint, links and its last Events:
    /// `tpu-operator describe tpl/NAME`.
    Describe(describe::DescribeArgs),
    /// What the operator knows of TPU capacity: the leader's stockout memory (per project, zone,
    /// accelerator and capacity kind: last stockout, blocked until when) and the slices waiting
    /// where: `tpu-operator capacity [-o json]`.
    Capacity(capacity::CapacityArgs),
    /// Run everything locally (Kubernetes and Google Cloud emulated), apply manifests, watch them
    /// converge, clean up and print a summary.
    #[cfg(feature = "local")]
    Local(local::LocalArgs),
    /// Not in this build (built without the `local` feature); says so instead of clap's
    /// "unrecognized subcommand".
    #[cfg(not(feature = "local"))]
    #[command(hide = true, disable_help_flag = true)]
    Local {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        _args: Vec<String>,
    },
}

fn main() -> ExitCode {
    allocator::tune();
    // kube (rustls/ring) and Google's clients (rustls/aws-lc-rs) are both linked: rustls cannot
    // pick a process-wide provider by itself and would panic on the first TLS config.
    rustls::crypto::aws_lc_rs::default_provider()
        .install_default()
        .expect("install the rustls crypto provider");
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crds(args) => crds::run(&args).map(|()| ExitCode::SUCCESS),
        Command::ConfigSchema => {
            println!("{:#}", config::config_file_schema());
            Ok(ExitCode::SUCCESS)
        }
        Command::ConvertTenancy(args) => convert_tenancy::run(&args).map(|()| ExitCode::SUCCESS),
        Command::MigrateStorage(args) => runtime()
            .block_on(migrate_storage::run(args))
            .map(|()| ExitCode::SUCCESS),
        Command::Run(args) => runtime().block_on(run::run(*args)).map(|()| ExitCode::SUCCESS),
        Command::Logs(args) => runtime().block_on(logs::run(args)).map(|()| ExitCode::SUCCESS),
        Command::Describe(args) => runtime()
            .block_on(describe::run(args))
            .map(|()| ExitCode::SUCCESS),
        Command::Capacity(args) => runtime()
            .block_on(capacity::run(args))
            .map(|()| ExitCode::SUCCESS),
        #[cfg(feature = "local")]
        Command::Local(args) => local::runtime(&args)
            .map_err(anyhow::Error::from)
            .and_then(|runtime| runtime.block_on(local::run(args))),
        #[cfg(not(feature = "local"))]
        Command::Local { .. } => Err(anyhow::anyhow!(
            "this tpu-operator was built without the `local` feature (no embedded emulators); \
             build it with default features for `local`: cargo run -p tpu-operator -- local ..."
        )),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("start the tokio runtime")
}
