//! Call metrics: every GCP call is counted by service, method and outcome, and timed.
//!
//! Exposed (after [`GcpMetrics::register`]) as
//! `gcp_calls_total{service,method,outcome}` (outcome = `ok` or an [`ErrorKind`] name) and
//! `gcp_call_duration_seconds{service,method}`. Because the clients never retry internally, one
//! count is one HTTP request, so tests can bound call storms from these numbers too.
//!
//! With a deadline ([`GcpMetrics::with_deadline`], set by [`crate::Gcp::connect`] to
//! `gcpCallTimeout`), every observed call, the wait for a token included, ends within it: a call
//! still running then fails as `Transient` and is counted like any failure.
//!
//! The credentials layer ([`crate::credentials`]) reports here too:
//! `gcp_credentials_errors_total{kind}` (`permanent`, `transient`, `timeout`),
//! `gcp_credentials_rebuilds_total` and `gcp_credentials_failing` (1 while no token arrives), and
//! [`GcpMetrics::credentials_failure`] for health checks.

use std::{
    future::Future,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use crate::{
    credentials::FailureKind,
    error::{ErrorKind, GcpError, Service},
};

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CredentialLabels {
    pub kind: &'static str,
}

/// Counters and histograms of GCP calls, and the credentials' health. Cheap to clone (shared
/// handles).
#[derive(Clone, Debug)]
pub struct GcpMetrics {
    calls: Family<CallLabels, Counter>,
    durations: Family<DurationLabels, Histogram, fn() -> Histogram>,
    credential_errors: Family<CredentialLabels, Counter>,
    credential_rebuilds: Counter,
    credentials_failing: Gauge,
    /// Since when and why the credentials have been failing; `None` while they work.
    credentials_health: Arc<Mutex<Option<(Instant, String)>>>,
    /// How many times the credentials recovered: a controller waits on it to re-queue at once
    /// the objects that stalled for want of a token, instead of leaving them to their backoff.
    recoveries: Arc<tokio::sync::watch::Sender<u64>>,
    /// Bound on every observed call (`None`: unbounded, as before `Gcp::connect` sets it).
    deadline: Option<Duration>,
    /// Held while each observed call is in flight (`None` in a cluster).
    hold: Option<CallHold>,
}

/// Makes a value that is held for as long as one observed call is in flight, and dropped when it
/// ends (answered, failed or cancelled). `tpu-operator local` runs on a paused clock that moves
/// only when every task waits on a timer; a request on its way through the loopback socket to
/// gcp-emulator is waited on by no timer, so the hold keeps the clock still until the answer is in.
#[derive(Clone)]
pub struct CallHold(Arc<dyn Fn() -> Box<dyn Send> + Send + Sync>);

impl CallHold {
    pub fn new(hold: impl Fn() -> Box<dyn Send> + Send + Sync + 'static) -> Self {
        Self(Arc::new(hold))
    }
}

impl std::fmt::Debug for CallHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallHold")
    }
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
            credential_errors: Family::default(),
            credential_rebuilds: Counter::default(),
            credentials_failing: Gauge::default(),
            credentials_health: Arc::default(),
            recoveries: Arc::new(tokio::sync::watch::Sender::new(0)),
            deadline: None,
            hold: None,
        }
    }

    /// The same metrics (shared handles), holding `hold`'s value while each call is in flight.
    pub fn with_call_hold(&self, hold: CallHold) -> Self {
        Self {
            hold: Some(hold),
            ..self.clone()
        }
    }

    /// The same metrics (shared handles), with every [`GcpMetrics::observe`]d call bounded by
    /// `deadline`.
    pub fn with_deadline(&self, deadline: Duration) -> Self {
        Self {
            deadline: Some(deadline),
            ..self.clone()
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
        registry.register(
            "gcp_credentials_errors",
            "Failed requests for a token (kind: permanent, transient, timeout)",
            metrics.credential_errors.clone(),
        );
        registry.register(
            "gcp_credentials_rebuilds",
            "Times the GCP credentials were built again after a permanent error or a timeout",
            metrics.credential_rebuilds.clone(),
        );
        registry.register(
            "gcp_credentials_failing",
            "1 while the GCP credentials cannot produce a token, else 0",
            metrics.credentials_failing.clone(),
        );
        metrics
    }

    pub(crate) fn credentials_error(&self, kind: FailureKind) {
        self.credential_errors
            .get_or_create(&CredentialLabels { kind: kind.as_str() })
            .inc();
    }

    pub(crate) fn credentials_rebuilt(&self) {
        self.credential_rebuilds.inc();
    }

    pub(crate) fn credentials_failing(&self, since: Instant, why: &str) {
        self.credentials_failing.set(1);
        *self
            .credentials_health
            .lock()
            .expect("credentials health poisoned") = Some((since, why.to_string()));
    }

    pub(crate) fn credentials_recovered(&self) {
        self.credentials_failing.set(0);
        *self
            .credentials_health
            .lock()
            .expect("credentials health poisoned") = None;
        self.recoveries.send_modify(|count| *count += 1);
    }

    /// Changes each time the credentials recover (tokens arrive again after failing); the value
    /// counts the recoveries so far.
    pub fn credentials_recoveries(&self) -> tokio::sync::watch::Receiver<u64> {
        self.recoveries.subscribe()
    }

    /// Why the credentials fail, while they fail (for `/readyz`): `None` once a token arrives.
    pub fn credentials_failure(&self) -> Option<String> {
        let health = self
            .credentials_health
            .lock()
            .expect("credentials health poisoned");
        health
            .as_ref()
            .map(|(since, why)| format!("GCP credentials failing for {:.0?}: {why}", since.elapsed()))
    }

    /// Failed token requests of one kind so far (for tests and summaries).
    pub fn credential_errors(&self, kind: FailureKind) -> u64 {
        self.credential_errors
            .get(&CredentialLabels { kind: kind.as_str() })
            .map_or(0, |counter| counter.get())
    }

    /// Rebuilds of the credentials so far.
    pub fn credential_rebuilds(&self) -> u64 {
        self.credential_rebuilds.get()
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

    /// Runs one call (bounded by the deadline, if set), records its outcome and duration, and
    /// logs failures at debug level.
    pub async fn observe<T>(
        &self,
        service: Service,
        method: &'static str,
        target: &str,
        call: impl Future<Output = Result<T, GcpError>>,
    ) -> Result<T, GcpError> {
        let started = Instant::now();
        let _held = self.hold.as_ref().map(|hold| (hold.0)());
        let result = match self.deadline {
            None => call.await,
            Some(deadline) => tokio::time::timeout(deadline, call).await.unwrap_or_else(|_| {
                Err(GcpError::new(
                    ErrorKind::Transient,
                    service,
                    method,
                    target,
                    format!(
                        "no answer within {deadline:?} (gcpCallTimeout), the wait for a token \
                         included"
                    ),
                ))
            }),
        };
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

    /// [`GcpMetrics::observe`] for a call made with one of Google's clients: `client` gives the
    /// client (one built per region on first use can fail; `ready(Ok(..))` for one built up
    /// front), `call` makes the request with it, and its error becomes a [`GcpError`] naming
    /// `service`, `method` and `target`. The one metered path of every generated client.
    pub async fn observe_gax<C, T, F>(
        &self,
        service: Service,
        method: &'static str,
        target: &str,
        client: impl Future<Output = Result<C, GcpError>>,
        call: impl FnOnce(C) -> F,
    ) -> Result<T, GcpError>
    where
        F: Future<Output = google_cloud_gax::Result<T>>,
    {
        let call = async {
            call(client.await?)
                .await
                .map_err(|err| GcpError::from_gax(service, method, target, &err))
        };
        self.observe(service, method, target, call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    /// The hold is taken before the call runs and let go when it ends, on success, on failure
    /// and when the caller drops the call half-way.
    #[tokio::test]
    async fn a_call_hold_lives_exactly_as_long_as_the_call() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        struct Live(Arc<AtomicUsize>);
        impl Drop for Live {
            fn drop(&mut self) {
                self.0.fetch_sub(1, SeqCst);
            }
        }
        let live = Arc::new(AtomicUsize::new(0));
        let counter = live.clone();
        let metrics = GcpMetrics::new().with_call_hold(CallHold::new(move || {
            counter.fetch_add(1, SeqCst);
            Box::new(Live(counter.clone()))
        }));
        let seen = metrics
            .observe(Service::Tpu, "nodes.get", "n", async { Ok(live.load(SeqCst)) })
            .await;
        assert_eq!(seen, Ok(1), "held while the call ran");
        assert_eq!(live.load(SeqCst), 0, "let go once it answered");
        let pending = metrics.observe(
            Service::Tpu,
            "nodes.get",
            "n",
            std::future::pending::<Result<(), _>>(),
        );
        let cancelled = tokio::time::timeout(Duration::from_millis(10), pending).await;
        assert!(cancelled.is_err());
        assert_eq!(live.load(SeqCst), 0, "let go when the caller gave up");
    }

    #[tokio::test]
    async fn observe_counts_outcomes_and_exports_them() {
        let mut registry = Registry::default();
        let metrics = GcpMetrics::register(&mut registry);
        let ok: Result<u8, GcpError> = metrics
            .observe(Service::Tpu, "nodes.get", "n", async { Ok(1) })
            .await;
        assert_eq!(ok, Ok(1));
        let missing = GcpError::new(ErrorKind::NotFound, Service::Tpu, "nodes.get", "n", "gone");
        let err = metrics
            .observe(Service::Tpu, "nodes.get", "n", async { Err::<u8, _>(missing) })
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
