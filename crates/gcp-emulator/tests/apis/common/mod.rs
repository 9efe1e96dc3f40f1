//! Shared helpers for the integration tests: an emulator on a manual clock, official clients
//! pointed at it with anonymous credentials and fast polling, and a background clock ticker.
#![allow(dead_code)]

use gcp_emulator::{Clock, Emulator};
use google_cloud_auth::credentials::anonymous::Builder as Anonymous;
use google_cloud_gax::exponential_backoff::{ExponentialBackoff, ExponentialBackoffBuilder};
use std::time::Duration;

pub const START: &str = "2026-01-01T00:00:00Z";

pub fn start_time() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(START)
        .unwrap()
        .with_timezone(&chrono::Utc)
}

pub async fn emulator() -> Emulator {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    Emulator::builder()
        .manual_clock(start_time())
        .start()
        .await
        .expect("emulator starts")
}

/// Polling fast in real time: emulated time is driven by the manual clock.
pub fn fast_polling() -> ExponentialBackoff {
    ExponentialBackoffBuilder::new()
        .with_initial_delay(Duration::from_millis(5))
        .with_maximum_delay(Duration::from_millis(20))
        .with_scaling(2.0)
        .build()
        .unwrap()
}

pub async fn tpu(emu: &Emulator) -> google_cloud_tpu_v2::client::Tpu {
    google_cloud_tpu_v2::client::Tpu::builder()
        .with_endpoint(format!("{}/tpu", emu.url()))
        .with_credentials(Anonymous::new().build())
        .with_polling_backoff_policy(fast_polling())
        .build()
        .await
        .expect("tpu client")
}

pub async fn dataproc(emu: &Emulator) -> google_cloud_dataproc_v1::client::BatchController {
    google_cloud_dataproc_v1::client::BatchController::builder()
        .with_endpoint(format!("{}/dataproc", emu.url()))
        .with_credentials(Anonymous::new().build())
        .with_polling_backoff_policy(fast_polling())
        .build()
        .await
        .expect("dataproc client")
}

pub async fn vertex(emu: &Emulator) -> google_cloud_aiplatform_v1::client::JobService {
    google_cloud_aiplatform_v1::client::JobService::builder()
        .with_endpoint(format!("{}/vertex", emu.url()))
        .with_credentials(Anonymous::new().build())
        .with_polling_backoff_policy(fast_polling())
        .build()
        .await
        .expect("vertex client")
}

/// Advances the manual clock by `step` every few real milliseconds until dropped, so LRO pollers
/// see operations complete.
pub struct Ticker(tokio::task::JoinHandle<()>);

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub fn ticker(clock: Clock, step: Duration) -> Ticker {
    Ticker(tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(3)).await;
            clock.advance(step);
        }
    }))
}

/// The canonical status name of a client error (e.g. `NOT_FOUND`), for assertions.
pub fn code(e: &google_cloud_gax::error::Error) -> String {
    let s = e
        .status()
        .unwrap_or_else(|| panic!("expected a service error, got {e:?}"));
    format!("{:?}", s.code)
}

pub fn http_status(e: &google_cloud_gax::error::Error) -> u16 {
    e.http_status_code()
        .unwrap_or_else(|| panic!("expected an HTTP error, got {e:?}"))
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Raw JSON call (for wire-level assertions the typed clients hide).
pub async fn raw(
    method: reqwest::Method,
    url: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let c = reqwest::Client::new();
    let mut r = c.request(method, url);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.expect("request sent");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}
