//! The `tpu-operator` binary.
//!
//! Subcommands live in [`Command`]; each has its own module so `run` and `local` can be added
//! next to `crds` without touching the others.
#![forbid(unsafe_code)]

mod crds;

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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds(args) => crds::run(&args),
    }
}
