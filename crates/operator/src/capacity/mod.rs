//! `tpu-operator capacity`: what the operator knows of TPU capacity, for the cluster the caller's
//! kubeconfig reaches. The last outcome per place (project, zone, accelerator, capacity kind)
//! and what is blocked until when come from the leader's stockout memory, which the leader
//! publishes into the ConfigMap `tpu-operator-capacity` in its namespace (see
//! `tpu_operator_controller::runtime::capacity::publish`); what waits where comes from the
//! TpuSlices the caller may list (a pipeline's TPU VM training runs on an owned TpuSlice, so its
//! wait is listed too).
//!
//! Read with the caller's own credentials. The ConfigMap names every team's projects, so it is
//! for admins; a tenant who may not read it, or may not list every namespace, still gets the rest,
//! with a line saying what was left out and why. `local --capacity` prints the same view from its
//! process's memory ([`view_of`]).

mod render;
mod view;

use std::path::PathBuf;

use chrono::Utc;
use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, api::ListParams};
use tpu_operator_api::tpu_slice::TpuSlice;
use tpu_operator_controller::runtime::capacity::snapshot::{CONFIGMAP, KEY, Snapshot};

pub use self::view::View;

/// Flags of `tpu-operator capacity`.
#[derive(Debug, Args)]
pub struct CapacityArgs {
    /// The operator's namespace, where the leader publishes its stockout memory.
    #[arg(long, env = "TPU_OPERATOR_NAMESPACE", default_value = "tpu-operator")]
    pub operator_namespace: String,
    /// List waiting slices in this namespace only [default: every namespace the caller may list,
    /// else the kubeconfig context's].
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: Output,
    /// kubeconfig to read with [default: in-cluster or ~/.kube/config].
    #[arg(long, env = "TPU_OPERATOR_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// Entry point of `tpu-operator capacity`.
pub async fn run(args: CapacityArgs) -> anyhow::Result<()> {
    let client = crate::run::kube_client(args.kubeconfig.as_deref()).await?;
    let mut unread = Vec::new();
    let memory = published_memory(&client, &args.operator_namespace)
        .await
        .map_err(|why| unread.push(why))
        .ok();
    let (slices, slices_unread) = waiting_slices(&client, args.namespace.as_deref()).await;
    unread.extend(slices_unread);
    let view = View {
        now: view::judged_at(Utc::now(), memory.as_ref()),
        memory,
        waiting: view::waiting(&slices),
        unread,
    };
    print(&view, args.output);
    Ok(())
}

/// The view of `local --capacity`: the memory read in-process, the slices from the emulated
/// cluster, the time from the emulated clock.
#[cfg(feature = "local")]
pub async fn view_of(snapshot: Snapshot, client: &kube::Client, now: chrono::DateTime<Utc>) -> View {
    let (slices, unread) = waiting_slices(client, None).await;
    View {
        now,
        memory: Some(snapshot),
        waiting: view::waiting(&slices),
        unread,
    }
}

pub fn print(view: &View, output: Output) {
    match output {
        Output::Table => print!("{}", render::table(view)),
        Output::Json => print!("{}", render::json(view)),
    }
}

/// The snapshot the leader published, or why it cannot be shown.
async fn published_memory(client: &kube::Client, namespace: &str) -> Result<Snapshot, String> {
    let what = format!("the stockout memory (ConfigMap {namespace}/{CONFIGMAP})");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = match api.get_opt(CONFIGMAP).await {
        Ok(Some(cm)) => cm,
        Ok(None) => {
            return Err(format!(
                "{what}: not found; the leader writes it within seconds of taking the lease \
                 (is the operator running in namespace {namespace}? another: --operator-namespace)"
            ));
        }
        Err(kube::Error::Api(s)) if s.code == 403 => {
            return Err(format!(
                "{what}: forbidden; it names every team's projects, so only the operator's \
                 admins may read it (`get` on configmaps/{CONFIGMAP} in {namespace})"
            ));
        }
        Err(e) => return Err(format!("{what}: {e}")),
    };
    let text = cm.data.and_then(|mut d| d.remove(KEY)).unwrap_or_default();
    serde_json::from_str(&text)
        .map_err(|e| format!("{what}: key {KEY} is not a snapshot this version reads: {e}"))
}

/// The TpuSlices to look for waits in: every namespace's, else (forbidden) the one namespace
/// asked for or the kubeconfig context's; with a line for each list that could not be read.
async fn waiting_slices(client: &kube::Client, namespace: Option<&str>) -> (Vec<TpuSlice>, Vec<String>) {
    let mut unread = Vec::new();
    if namespace.is_none() {
        match Api::<TpuSlice>::all(client.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(list) => return (list.items, unread),
            Err(e) => unread.push(format!("TpuSlices in every namespace: {}", reason(&e))),
        }
    }
    let ns = namespace.map_or_else(|| client.default_namespace().to_owned(), str::to_owned);
    match Api::<TpuSlice>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => {
            if namespace.is_none() {
                unread.push(format!("(waiting slices are those of namespace {ns} only)"));
            }
            (list.items, unread)
        }
        Err(e) => {
            unread.push(format!("TpuSlices in namespace {ns}: {}", reason(&e)));
            (Vec::new(), unread)
        }
    }
}

/// The server's reason (`forbidden`, ...) or the error.
fn reason(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 => "forbidden".into(),
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}
