//! What a pipeline asks of the namespace's policy, built from its spec: everything it will
//! create (its Dataproc batch, its Vertex job or training slice, each as its own kind asks it),
//! and the Vertex job's price.

use tpu_operator_api::training_pipeline::{SchedulingStrategy, TrainingPipelineSpec, VertexTraining};

use crate::{
    governance::{
        pricing::{CapacityKind, PriceTable},
        tenancy::{
            NetworkUse, Request, TpuUse,
            request::{Fields, Named, orphans, storage_of},
        },
    },
    kinds::{preprocess_batch::policy as batch_policy, tpu_slice::policy as slice_policy},
};

/// The job's capacity kind: [`SchedulingStrategy::kind`], the definition admission uses too.
fn vertex_capacity(v: &VertexTraining) -> CapacityKind {
    v.scheduling
        .as_ref()
        .map_or(SchedulingStrategy::default(), |s| s.strategy)
        .kind()
}

/// Estimated US dollars per hour of the pipeline's Vertex job, with its price key.
pub fn vertex_per_hour(v: &VertexTraining, prices: &PriceTable) -> (f64, String) {
    let shape = v.tpu_shape();
    let replicas = u32::try_from(v.replica_count.max(1)).unwrap_or(1);
    prices.vertex_per_hour(
        v.machine_type,
        shape.as_ref(),
        replicas,
        vertex_capacity(v) == CapacityKind::Spot,
    )
}

/// The Vertex job of a pipeline in Vertex mode (chips = all replicas).
pub fn vertex_job(spec: &TrainingPipelineSpec, project: &str, prices: &PriceTable) -> Option<Request> {
    let v = spec.training.vertex.as_ref()?;
    let tpu = v.tpu_shape().map(|mut shape| {
        let replicas = u32::try_from(v.replica_count.max(1)).unwrap_or(1);
        shape.chips *= replicas;
        TpuUse {
            shape,
            capacity: vertex_capacity(v),
        }
    });
    Some(Request {
        what: format!(
            "Vertex custom job ({} in {})",
            v.machine_type.as_str(),
            spec.region
        ),
        project: project.to_owned(),
        region: spec.region.clone(),
        zone: None,
        tpu,
        per_hour_usd: vertex_per_hour(v, prices).0,
        service_account: v.service_account.clone(),
        network: v.network.clone().map_or(NetworkUse::Unused, NetworkUse::Named),
        orphan: orphans(spec.deletion_policy),
        fields: Fields {
            network: "spec.training.vertex.network".into(),
            subnetwork: String::new(),
        },
        in_projects: v
            .tensorboard
            .iter()
            .map(|t| Named::new("spec.training.vertex.tensorboard", t.clone()))
            .collect(),
        ..Request::default()
    })
}

/// Everything a pipeline will create, for the check before it creates anything: its Dataproc
/// batch (when it preprocesses), then its Vertex job or training slice.
pub fn pipeline(spec: &TrainingPipelineSpec, project: &str, prices: &PriceTable) -> Vec<Request> {
    let mut out = Vec::new();
    if let Some(template) = &spec.preprocess {
        out.push(batch_policy::batch_at(
            project,
            &spec.region,
            template,
            "spec.preprocess",
        ));
    }
    if let Some(job) = vertex_job(spec, project, prices) {
        out.push(job);
    }
    if let Some(slice) = spec.training.tpu_vm.as_ref().and_then(|t| {
        let project = t.slice.project.as_deref().unwrap_or(project);
        match &t.slice.adopt_node_id {
            Some(id) => {
                let node = format!("projects/{project}/locations/{}/nodes/{id}", t.slice.zone);
                slice_policy::adopting(&t.slice, project, &node, prices)
            }
            None => slice_policy::request_at(&t.slice, project, prices, "spec.training.tpuVm.slice"),
        }
    }) {
        out.push(slice);
    }
    // The pipeline's policy is its children's (an `Orphan` slice spec orphans the slice alone).
    for r in &mut out {
        r.orphan |= orphans(spec.deletion_policy);
    }
    pipeline_storage(spec, &mut out);
    out
}

/// Every Cloud Storage location of a pipeline (artifacts, packages, the batch's and the
/// slice's), checked once: on its first request.
fn pipeline_storage(spec: &TrainingPipelineSpec, out: &mut [Request]) {
    for r in out.iter_mut() {
        r.storage.clear();
    }
    let Some(first) = out.first_mut() else {
        return;
    };
    first.storage = storage_of(spec, "spec");
    if let Some(b) = spec
        .preprocess
        .as_ref()
        .and_then(|p| p.execution.as_ref()?.staging_bucket.clone())
    {
        first
            .storage
            .push(Named::new("spec.preprocess.execution.stagingBucket", b));
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pipeline_spec(training: serde_json::Value) -> TrainingPipelineSpec {
        serde_json::from_value(json!({
            "region": "us-east5",
            "artifacts": {"modelDir": "gs://b/m/", "processedData": "gs://b/p/"},
            "preprocess": {"pyspark": {"mainPythonFileUri": "gs://b/s.py"},
                           "execution": {"serviceAccount": "etl@p.iam.gserviceaccount.com",
                                         "subnetworkUri": "team-sub"}},
            "training": training,
        }))
        .unwrap()
    }

    #[test]
    fn pipelines_carry_the_identity_and_network_of_everything_they_create() {
        let prices = PriceTable::default();
        let spec = pipeline_spec(json!({"tpuVm": {
            "slice": {"zone": "us-east5-b", "acceleratorType": "v6e-8", "runtimeVersion": "v",
                      "adoptNodeId": "theirs"},
            "container": {"image": "i"}}}));
        let reqs = pipeline(&spec, "p", &prices);
        assert_eq!(reqs.len(), 2, "{reqs:#?}");
        let batch = &reqs[0];
        assert_eq!(
            batch.service_account.as_deref(),
            Some("etl@p.iam.gserviceaccount.com")
        );
        assert_eq!(
            (&batch.network, batch.subnetwork.as_deref()),
            (&NetworkUse::OfSubnetwork, Some("team-sub"))
        );
        let slice = &reqs[1];
        assert_eq!(
            slice.adopt.as_deref(),
            Some("projects/p/locations/us-east5-b/nodes/theirs")
        );
        assert!(
            slice.identity_pending,
            "the node's identity is judged once it is read"
        );

        let spec = pipeline_spec(json!({"vertex": {
            "machineType": "ct6e-standard-4t", "tpuTopology": "2x2", "container": {"image": "i"},
            "serviceAccount": "t@p.iam.gserviceaccount.com"}}));
        let job = vertex_job(&spec, "p", &prices).unwrap();
        assert_eq!(
            job.service_account.as_deref(),
            Some("t@p.iam.gserviceaccount.com")
        );
        assert_eq!(job.network, NetworkUse::Unused, "no peering: no network of ours");
        assert_eq!(
            slice_policy::request(
                &serde_json::from_value(
                    json!({"zone": "us-east5-b", "acceleratorType": "v6e-8", "runtimeVersion": "v"})
                )
                .unwrap(),
                "p",
                &prices
            )
            .unwrap()
            .network,
            NetworkUse::Default
        );
    }
}
