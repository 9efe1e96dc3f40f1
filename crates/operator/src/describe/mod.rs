//! `tpu-operator describe KIND/NAME`: one screen about an object, where `kubectl describe` runs
//! to about 100 lines: its phase and what it waits for, attempts, stages with their times, cost,
//! checkpoint, links and its last Events. Objects and kubeconfigs are resolved as `logs` does.

mod kinds;
mod sheet;

use std::path::PathBuf;

use clap::Args;
use k8s_openapi::api::core::v1::Event;
use kube::{Api, Resource, ResourceExt, api::ListParams};
use tpu_operator_api::{
    preprocess_batch::PreprocessBatch, tpu_slice::TpuSlice, training_pipeline::TrainingPipeline,
};

use self::sheet::Sheet;
use crate::object::{Kind, Object, from_server};

/// Events shown, newest last.
const EVENTS: usize = 5;

/// Flags of `tpu-operator describe`.
#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// What to describe: `trainingpipeline/NAME` (`tpl/NAME`), `tpuslice/NAME` (`tpus/NAME`) or
    /// `preprocessbatch/NAME` (`ppb/NAME`).
    pub object: String,
    /// The object's namespace [default: the kubeconfig context's].
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// kubeconfig to read the object with [default: in-cluster or ~/.kube/config].
    #[arg(long, env = "TPU_OPERATOR_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

/// Entry point of `tpu-operator describe`.
pub async fn run(args: DescribeArgs) -> anyhow::Result<()> {
    let object = Object::parse(&args.object, "description")?;
    let client = crate::run::kube_client(args.kubeconfig.as_deref()).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let mut sheet = Sheet::default();
    let logs_cmd = format!("tpu-operator logs {} -n {namespace}", short(&object));
    let uid = match object.kind {
        Kind::TrainingPipeline => {
            let tp: TrainingPipeline = object.get(&client, &namespace).await?;
            kinds::pipeline(&mut sheet, &tp, &logs_cmd);
            tp.uid()
        }
        Kind::TpuSlice => {
            let slice: TpuSlice = object.get(&client, &namespace).await?;
            kinds::slice(&mut sheet, &slice, &logs_cmd);
            slice.uid()
        }
        Kind::PreprocessBatch => {
            let b: PreprocessBatch = object.get(&client, &namespace).await?;
            kinds::batch(&mut sheet, &b, &logs_cmd);
            b.uid()
        }
    };
    events(&mut sheet, &client, &namespace, &object, uid.as_deref()).await?;
    print!("{}", sheet.render());
    Ok(())
}

/// `tpl/NAME`, `tpus/NAME` or `ppb/NAME`.
fn short(object: &Object) -> String {
    let kind = match object.kind {
        Kind::TrainingPipeline => "tpl",
        Kind::TpuSlice => "tpus",
        Kind::PreprocessBatch => "ppb",
    };
    format!("{kind}/{}", object.name)
}

/// The object's last [`EVENTS`] Events (core/v1, as `kubectl describe` lists them), oldest first.
async fn events(
    sheet: &mut Sheet,
    client: &kube::Client,
    namespace: &str,
    object: &Object,
    uid: Option<&str>,
) -> anyhow::Result<()> {
    let mut selector = format!(
        "involvedObject.kind={},involvedObject.name={}",
        object.kind.name(),
        object.name
    );
    if let Some(uid) = uid {
        selector.push_str(&format!(",involvedObject.uid={uid}"));
    }
    let what = format!("the Events of {}", object.display(namespace));
    let mut list = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&selector))
        .await
        .map_err(|e| from_server(e, &what, namespace))?
        .items;
    list.sort_by_key(|e| sheet::event_time(e).map(|t| t.0));
    let total = list.len();
    if total == 0 {
        sheet.row("Events", "none");
        return Ok(());
    }
    sheet.section(&format!("Events (last {} of {total})", EVENTS.min(total)));
    for e in list.iter().skip(total.saturating_sub(EVENTS)) {
        let when = sheet::event_time(e).map_or_else(|| "-".into(), |t| sheet::clock(&t));
        let kind = e.type_.clone().unwrap_or_default();
        let reason = e.reason.clone().unwrap_or_default();
        let count = e
            .count
            .filter(|c| *c > 1)
            .map(|c| format!(" (x{c})"))
            .unwrap_or_default();
        let note = e.message.clone().unwrap_or_default();
        sheet.item(&format!("{when}  {kind:<7} {reason}{count}: {note}"));
    }
    Ok(())
}

/// The object's API kind for the header, e.g. `TrainingPipeline (tpl)`.
fn header<K: Resource<DynamicType = ()>>(sheet: &mut Sheet, o: &K, short: &str) {
    sheet.row("Name", &o.meta().name.clone().unwrap_or_default());
    sheet.row("Namespace", &o.meta().namespace.clone().unwrap_or_default());
    sheet.row("Kind", &format!("{} ({short})", K::kind(&())));
}
