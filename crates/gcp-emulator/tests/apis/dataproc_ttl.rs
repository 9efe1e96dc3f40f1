//! Issue 21 item 6: a Dataproc Serverless batch that runs past its `executionConfig.ttl` is
//! terminated by the service (FAILED at the ttl, with a stateMessage naming it), and the 4-hour
//! default applies when the request sets none. Through Google's official Rust client.

use crate::common;

use common::*;
use google_cloud_dataproc_v1::model::{Batch, EnvironmentConfig, ExecutionConfig, PySparkBatch, batch};

const PARENT: &str = "projects/p/locations/us-central1";

fn pyspark(ttl: Option<i64>) -> Batch {
    let b = Batch::new().set_pyspark_batch(
        PySparkBatch::new()
            .set_main_python_file_uri("gs://code/main.py")
            .set_args(["gs://data/processed/"]),
    );
    match ttl {
        Some(secs) => b.set_environment_config(EnvironmentConfig::new().set_execution_config(
            ExecutionConfig::new().set_ttl(google_cloud_wkt::Duration::clamp(secs, 0)),
        )),
        None => b,
    }
}

async fn get(c: &google_cloud_dataproc_v1::client::BatchController, id: &str) -> Batch {
    c.get_batch()
        .set_name(format!("{PARENT}/batches/{id}"))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_batch_running_past_its_ttl_is_terminated_at_the_ttl() {
    let emu = emulator().await;
    let mut cfg = emu.config();
    cfg.durations.batch_run = secs(3600);
    emu.set_config(cfg);
    let dp = dataproc(&emu).await;
    dp.create_batch()
        .set_parent(PARENT)
        .set_batch_id("ttl-1")
        .set_batch(pyspark(Some(600)))
        .send()
        .await
        .unwrap();
    emu.clock().advance(secs(60 + 599));
    assert_eq!(get(&dp, "ttl-1").await.state, batch::State::Running);
    emu.clock().advance(secs(2));
    let b = get(&dp, "ttl-1").await;
    assert_eq!(b.state, batch::State::Failed);
    assert!(b.state_message.contains("ttl of 600s"), "{}", b.state_message);
    assert!(
        emu.object("data", "processed/_SUCCESS").is_none(),
        "a terminated batch writes nothing"
    );
}

#[tokio::test]
async fn the_default_ttl_is_four_hours() {
    let emu = emulator().await;
    let mut cfg = emu.config();
    cfg.durations.batch_run = secs(5 * 3600);
    emu.set_config(cfg);
    let dp = dataproc(&emu).await;
    dp.create_batch()
        .set_parent(PARENT)
        .set_batch_id("ttl-2")
        .set_batch(pyspark(None))
        .send()
        .await
        .unwrap();
    let b = get(&dp, "ttl-2").await;
    let ttl = b
        .environment_config
        .and_then(|e| e.execution_config)
        .and_then(|e| e.ttl)
        .map(|t| t.seconds());
    assert_eq!(ttl, Some(14_400));
    emu.clock().advance(secs(60 + 4 * 3600 + 1));
    let b = get(&dp, "ttl-2").await;
    assert_eq!(b.state, batch::State::Failed);
    assert!(b.state_message.contains("14400s"), "{}", b.state_message);
}
