//! `tpu-operator crds`: print or write the generated CRDs and the CRD reference.
//!
//! The CRDs carry prune protection for Helm, Argo CD and Flux
//! (`tpu_operator_api::crds::CRD_ANNOTATIONS`): a GitOps prune of a CRD deletes every object of
//! its kind, and through their cleanup finalizers every TPU node, batch and job they own. The
//! annotations are added in crates/api (not here) so that everything that installs the CRDs (this
//! command, `local`, the tests and the committed `crds/`, chart and `deploy/crds` copies) carries
//! the same bytes.

use std::{
    fs,
    io::{self, Write},
    path::PathBuf,
};

use anyhow::Context;
use clap::Args;

/// Arguments of `tpu-operator crds`.
#[derive(Debug, Args)]
pub struct CrdsArgs {
    /// Write one `<plural>.<group>.yaml` per CRD into this directory instead of printing them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Also write the Markdown CRD reference to this file (e.g. `docs/crd-reference.md`).
    #[arg(long, value_name = "FILE")]
    pub reference: Option<PathBuf>,
}

/// Runs the subcommand.
pub fn run(args: &CrdsArgs) -> anyhow::Result<()> {
    match &args.out {
        None if args.reference.is_none() => print_stdout(&tpu_operator_api::crds::render_stream())?,
        None => {}
        Some(dir) => {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, yaml) in tpu_operator_api::crds::render_all() {
                let path = dir.join(name);
                fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
    }
    if let Some(path) = &args.reference {
        fs::write(path, tpu_operator_api::reference::render())
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Writes to stdout; a closed pipe (`tpu-operator crds | head`) is not an error.
fn print_stdout(text: &str) -> anyhow::Result<()> {
    match io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing the CRDs to stdout"),
    }
}
