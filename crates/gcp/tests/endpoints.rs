//! Endpoint templates through `Gcp::connect` and Google's real clients, against a local server
//! that records the request paths (anonymous credentials: no environment involved).

use std::sync::{Arc, Mutex};

use axum::{Router, extract::State, http::Uri, response::IntoResponse};
use tpu_operator_gcp::{CredentialsMode, Gcp, GcpConfig, GcpMetrics};

async fn record(State(paths): State<Arc<Mutex<Vec<String>>>>, uri: Uri) -> impl IntoResponse {
    paths.lock().unwrap().push(uri.path().to_string());
    ([("content-type", "application/json")], r#"{"name":"recorded"}"#)
}

/// Item 9: `{region}` in the Dataproc endpoint is replaced by the region of the batch (from
/// `projects/p/locations/{region}/batches/...`) or of the operation
/// (`projects/p/regions/{region}/operations/...`), like the Vertex endpoint's placeholder: the
/// regional endpoints `https://{region}-dataproc.googleapis.com` work.
#[tokio::test]
async fn dataproc_endpoint_region_placeholder_follows_the_resource_region() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let paths = Arc::new(Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = Router::new().fallback(record).with_state(paths.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let config = GcpConfig {
        dataproc_endpoint: format!("{base}/{{region}}"),
        tpu_endpoint: base.clone(),
        vertex_endpoint: base.clone(),
        storage_endpoint: base.clone(),
        compute_endpoint: base.clone(),
        credentials: CredentialsMode::Anonymous,
        ..GcpConfig::production()
    };
    let gcp = Gcp::connect(config, GcpMetrics::new())
        .await
        .expect("clients build");

    gcp.dataproc
        .get_batch("projects/p/locations/europe-west4/batches/b1")
        .await
        .expect("batches.get");
    gcp.dataproc
        .get_operation("projects/p/regions/us-central1/operations/op1")
        .await
        .expect("operations.get");
    gcp.dataproc
        .get_batch("projects/p/locations/europe-west4/batches/b2")
        .await
        .expect("batches.get");
    assert_eq!(
        *paths.lock().unwrap(),
        [
            "/europe-west4/v1/projects/p/locations/europe-west4/batches/b1",
            "/us-central1/v1/projects/p/regions/us-central1/operations/op1",
            "/europe-west4/v1/projects/p/locations/europe-west4/batches/b2",
        ]
    );

    let err = gcp
        .dataproc
        .get_batch("batches/without-a-region")
        .await
        .expect_err("no region, no endpoint");
    assert_eq!(err.kind, tpu_operator_gcp::ErrorKind::InvalidArgument, "{err}");
}
