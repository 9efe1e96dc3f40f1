//! Call metrics: every GCP call is counted by service, method and outcome, and timed.
//!
//! Exposed (after [`GcpMetrics::register`]) as
//! `gcp_calls_total{service,method,outcome}` (outcome = `ok` or an [`ErrorKind`] name) and
//! `gcp_call_duration_seconds{service,method}`. Because the clients never retry internally, one
//! count is one HTTP request, so tests can bound call storms from these numbers too.

use std::{future::Future, time::Instant};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use crate::error::{GcpError, Service};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub service: &'static str,
    pub method: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    pub service: &'static str,
    pub method: &'static str,
}

/// Counters and histograms of GCP calls. Cheap to clone (shared handles).
#[derive(Clone, Debug)]
pub struct GcpMetrics {
    calls: Family<CallLabels, Counter>,
    durations: Family<DurationLabels, Histogram, fn() -> Histogram>,
}

impl Default for GcpMetrics {
    fn default() -> Self {
        Self::new()
    }
}

fn duration_histogram() -> Histogram {
    // 5 ms .. ~41 s: GCP control-plane calls take tens to hundreds of milliseconds; the top
    // buckets catch calls that run into the attempt timeout.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

impl GcpMetrics {
    /// Metrics that are not exported anywhere until [`GcpMetrics::register`] is called.
    pub fn new() -> Self {
        Self {
            calls: Family::default(),
            durations: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
        }
    }

    /// New metrics, registered in `registry` (which may carry the operator's prefix).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::new();
        registry.register(
            "gcp_calls",
            "GCP API calls by service, method and outcome (ok or the error kind)",
            metrics.calls.clone(),
        );
        registry.register(
            "gcp_call_duration_seconds",
            "Duration of GCP API calls by service and method",
            metrics.durations.clone(),
        );
        metrics
    }

    /// Records one finished call.
    pub fn record(&self, service: Service, method: &'static str, outcome: &'static str, seconds: f64) {
        let service = service.as_str();
        self.calls
            .get_or_create(&CallLabels {
                service,
                method,
                outcome,
            })
            .inc();
        self.durations
            .get_or_create(&DurationLabels { service, method })
            .observe(seconds);
    }

    /// Number of calls recorded so far with these labels (for tests and summaries).
    pub fn calls(&self, service: Service, method: &'static str, outcome: &'static str) -> u64 {
        let labels = CallLabels {
            service: service.as_str(),
            method,
            outcome,
        };
        self.calls.get(&labels).map_or(0, |counter| counter.get())
    }

    /// Runs one call, records its outcome and duration, and logs failures at debug level.
    pub async fn observe<T>(
        &self,
        service: Service,
        method: &'static str,
        call: impl Future<Output = Result<T, GcpError>>,
    ) -> Result<T, GcpError> {
        let started = Instant::now();
        let result = call.await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(err) => {
                tracing::debug!(%service, method, error = %err, "GCP call failed");
                err.kind.as_str()
            }
        };
        self.record(service, method, outcome, started.elapsed().as_secs_f64());
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use prometheus_client::encoding::text::encode;

    #[tokio::test]
    async fn observe_counts_outcomes_and_exports_them() {
        let mut registry = Registry::default();
        let metrics = GcpMetrics::register(&mut registry);
        let ok: Result<u8, GcpError> = metrics.observe(Service::Tpu, "nodes.get", async { Ok(1) }).await;
        assert_eq!(ok, Ok(1));
        let missing = GcpError::new(ErrorKind::NotFound, Service::Tpu, "nodes.get", "n", "gone");
        let err = metrics
            .observe(Service::Tpu, "nodes.get", async { Err::<u8, _>(missing) })
            .await;
        assert!(err.unwrap_err().is_not_found());

        assert_eq!(metrics.calls(Service::Tpu, "nodes.get", "ok"), 1);
        assert_eq!(metrics.calls(Service::Tpu, "nodes.get", "not_found"), 1);
        assert_eq!(metrics.calls(Service::Tpu, "nodes.create", "ok"), 0);

        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"gcp_calls_total{service="tpu",method="nodes.get",outcome="not_found"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"gcp_call_duration_seconds_count{service="tpu",method="nodes.get"} 2"#),
            "{text}"
        );
    }
}
