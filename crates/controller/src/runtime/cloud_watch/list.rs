//! One listing: every resource of a collection and location this cluster may be waiting on,
//! a page at a time.

use tpu_operator_api::naming::{labels, sanitize_label_value};
use tpu_operator_gcp::{
    GcpError, aiplatform_v1::model::JobState, compute, dataproc_v1::model::batch::State as BatchState,
};

use super::{
    CloudWatch, Collection, Listed,
    listed::{BATCH_STATES_LISTED, JOB_STATES_LISTED, state_filter},
    registry::Key,
};

/// Every resource of `key` this cluster may be waiting on, a page at a time to `sift`. Dataproc
/// and Vertex are filtered to this cluster's label and to the states that can still change.
impl CloudWatch {
    pub(super) async fn list(
        &self,
        (collection, parent): &Key,
        sift: &mut (dyn FnMut(&mut dyn Iterator<Item = Listed>) + Send),
    ) -> Result<(), GcpError> {
        let cluster = format!(
            "labels.{} = \"{}\"",
            labels::CLUSTER,
            sanitize_label_value(&self.settings().cluster_id)
        );
        match collection {
            Collection::TpuNodes => {
                let mut page = pages_to(sift, Listed::Node);
                self.gcp.tpu.list_nodes_by_page(parent, &mut page).await
            }
            Collection::DataprocBatches => {
                // Dataproc's filter takes enum names bare, Vertex's quoted.
                let states = state_filter(&BATCH_STATES_LISTED, BatchState::name, str::to_owned);
                let filter = format!("{cluster} AND ({states})");
                let mut page = pages_to(sift, Listed::Batch);
                self.gcp
                    .dataproc
                    .list_batches_by_page(parent, &filter, &mut page)
                    .await
            }
            Collection::ComputeSlices => {
                let (project, zone) = parent
                    .strip_prefix("projects/")
                    .and_then(|rest| rest.split_once("/locations/"))
                    .unwrap_or_default();
                let place = tpu_operator_gcp::Place::new(project, zone);
                // Every instance is needed before any slice can be told (a group's hosts may
                // span pages); this cluster's are few next to a zone's TPU nodes.
                let instances = self.gcp.compute.list_instances(&place, &cluster).await?;
                let slices = compute::convert::listed_slices(parent, instances);
                sift(&mut slices.into_iter().map(|n| Listed::Node(Box::new(n))));
                Ok(())
            }
            Collection::VertexJobs => {
                let states = state_filter(&JOB_STATES_LISTED, JobState::name, |n| format!("\"{n}\""));
                let filter = format!("{cluster} AND ({states})");
                let mut page = pages_to(sift, Listed::Job);
                self.gcp
                    .vertex
                    .list_custom_jobs_by_page(parent, &filter, &mut page)
                    .await
            }
        }
    }
}

/// A page handler for `*_by_page` that hands each item, wrapped by `wrap`, to `sift`.
fn pages_to<'a, T: Send + 'a>(
    sift: &'a mut (dyn FnMut(&mut dyn Iterator<Item = Listed>) + Send),
    wrap: fn(Box<T>) -> Listed,
) -> impl FnMut(Vec<T>) + Send + 'a {
    move |page: Vec<T>| sift(&mut page.into_iter().map(|item| wrap(Box::new(item))))
}
