//! Objects larger than the watch cache keeps whole (a long startup script, big node metadata): the
//! cache keeps them lean, and the pass reads them whole from the API server, so the TPU node gets
//! every byte the spec asked for.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{Progress, progress_of},
    tpu_slice::TpuSlice,
};
use tpu_operator_controller::{kinds::tpu_slice, never_shutdown};

const STEP: Duration = Duration::from_secs(20);

/// `n` letters that barely compress, so the object's JSON stays far over the cache's budget.
fn noise(seed: u64, n: usize) -> String {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| char::from(rng.random_range(b'a'..=b'z')))
        .collect()
}

fn is_ready(s: &TpuSlice) -> bool {
    s.status.as_ref().and_then(|st| progress_of(&st.conditions)) == Some(Progress::Ready)
}

#[tokio::test]
async fn a_slice_too_large_to_cache_whole_gets_all_its_metadata_on_the_node() {
    let mut env = TestEnv::start().await;
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    let script = noise(1, 256 * 1024);
    let slice: TpuSlice = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": "big"},
        "spec": {
            "zone": "us-east5-b", "acceleratorType": "v6e-8", "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": {"onDemand": {}},
            "metadata": {"dataset-manifest": script, "env": "a"},
            "startupScript": "#!/bin/sh\necho started\n",
        }
    }))
    .unwrap();
    env.create(&slice).await;
    env.wait_for::<TpuSlice, _>("big", "Ready", STEP, is_ready).await;
    let node = env.gcp.nodes()[0].clone();
    assert_eq!(
        node["metadata"]["dataset-manifest"].as_str().map(str::len),
        Some(script.len()),
        "the node got the cache's lean copy, not the object"
    );
    assert_eq!(node["metadata"]["dataset-manifest"], script.as_str());

    // A change to a short field of the large object still reaches the node, long value intact.
    env.api::<TpuSlice>()
        .patch(
            "big",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"metadata": {"env": "b"}}})),
        )
        .await
        .unwrap();
    env.until("the metadata patched", STEP, async || {
        env.gcp.nodes()[0]["metadata"]["env"] == "b"
    })
    .await;
    assert_eq!(
        env.gcp.nodes()[0]["metadata"]["dataset-manifest"],
        script.as_str()
    );
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 1);
    assert_eq!(
        env.gcp.call_count("tpu", "nodes.patch"),
        1,
        "{:?}",
        env.gcp.call_counts()
    );
}

/// Every list of tenant objects reads them a page at a time and still sees them all: two pages
/// and twenty objects, 3 pages, each object once.
#[tokio::test]
async fn a_paged_list_reads_every_object_once() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use tpu_operator_controller::runtime::listing;
    let env = TestEnv::start().await;
    let api = env.api::<ConfigMap>();
    let n = 2 * listing::PAGE as usize + 20;
    for i in 0..n {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("cm-{i:03}")}})).unwrap();
        api.create(&Default::default(), &cm).await.unwrap();
    }
    let mut seen = Vec::new();
    listing::for_each(&api, |cm: ConfigMap| {
        let name = cm.metadata.name.unwrap_or_default();
        if name.starts_with("cm-") {
            seen.push(name);
        }
    })
    .await
    .unwrap();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), n);
}

/// Large objects pass a few at a time (`fair_share::LARGE_AT_ONCE`), the rest requeued a moment
/// later: each of six still converges, its node created once, whether the cache kept it lean
/// (incompressible metadata) or whole (a large value that compresses to little), and a small slice
/// created after them is not held behind them.
#[tokio::test]
async fn large_objects_wait_their_turn_and_each_converges_once() {
    let mut env = TestEnv::start().await;
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    let slice = |name: &str, value: String| -> TpuSlice {
        serde_json::from_value(json!({
            "apiVersion": "tpu-operator.dev/v1beta1",
            "kind": "TpuSlice",
            "metadata": {"name": name},
            "spec": {
                "zone": "us-east5-b", "acceleratorType": "v6e-8", "runtimeVersion": "v2-alpha-tpuv6e",
                "capacity": {"onDemand": {}},
                "metadata": {"payload": value},
            }
        }))
        .unwrap()
    };
    for i in 0..6u64 {
        let value = if i % 2 == 0 {
            noise(i, 200 * 1024)
        } else {
            "a".repeat(200 * 1024)
        };
        env.create(&slice(&format!("big-{i}"), value)).await;
    }
    env.create(&slice("small", "x".into())).await;
    env.wait_for::<TpuSlice, _>("small", "Ready", STEP, is_ready)
        .await;
    for i in 0..6 {
        env.wait_for::<TpuSlice, _>(&format!("big-{i}"), "Ready", STEP, is_ready)
            .await;
    }
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 7);
    for node in env.gcp.nodes() {
        let len = node["metadata"]["payload"].as_str().map_or(0, str::len);
        assert!(len == 1 || len == 200 * 1024, "payload of {len} bytes");
    }
}
