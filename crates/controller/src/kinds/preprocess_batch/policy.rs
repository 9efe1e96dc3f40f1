//! What a batch asks of the namespace's policy, built from its template: a Dataproc batch create
//! with its execution settings. A pipeline's preprocessing asks the same, from the template
//! inside the pipeline.

use tpu_operator_api::preprocess_batch::BatchTemplate;

use crate::governance::tenancy::{
    NetworkUse, Request,
    request::{Fields, Named, storage_of},
};

/// A Dataproc batch create: project and region only.
fn dataproc_batch(project: &str, region: &str) -> Request {
    Request {
        what: "Dataproc batch".into(),
        project: project.to_owned(),
        region: region.to_owned(),
        network: NetworkUse::Default,
        ..Request::default()
    }
}

/// A Dataproc batch create with its execution settings: project, region, service account and
/// network (`networkUri` or `subnetworkUri`; the subnetwork wins if both slipped through, as in
/// the request the operator sends).
pub fn batch(project: &str, region: &str, template: &BatchTemplate) -> Request {
    batch_at(project, region, template, "spec")
}

/// A batch whose template is at `at` (`spec`, or a pipeline's `spec.preprocess`).
pub fn batch_at(project: &str, region: &str, template: &BatchTemplate, at: &str) -> Request {
    let mut req = dataproc_batch(project, region);
    req.storage = storage_of(template, at);
    req.fields = Fields {
        network: format!("{at}.execution.networkUri"),
        subnetwork: format!("{at}.execution.subnetworkUri"),
    };
    let Some(e) = &template.execution else {
        return req;
    };
    if let Some(b) = &e.staging_bucket {
        req.storage
            .push(Named::new(format!("{at}.execution.stagingBucket"), b.clone()));
    }
    req.service_account = e.service_account.clone();
    (req.network, req.subnetwork) = match (&e.subnetwork_uri, &e.network_uri) {
        (Some(subnet), _) => (NetworkUse::OfSubnetwork, Some(subnet.clone())),
        (None, Some(net)) => (NetworkUse::Named(net.clone()), None),
        (None, None) => (NetworkUse::Default, None),
    };
    req
}
