//! Credentials that recover by themselves, are bounded in time, and say when they fail.
//!
//! `google-cloud-auth` keeps one token cache per [`Credentials`], refreshed by a background task.
//! Two of its behaviours hurt an operator that runs for weeks (googleapis/google-cloud-rust
//! #4541, #5864):
//!
//! * a **permanent** error from the token source (GKE's metadata server answers 403 while a
//!   Workload Identity binding is missing or still propagating, 404 for an unknown service
//!   account) ends the refresh task: the error is cached and every later call fails with it,
//!   for the life of the process, even after the binding is fixed;
//! * a token source that accepts the connection and **never answers** blocks every caller that
//!   waits for the first (or next) token, with no timeout, outside the clients' attempt timeout.
//!
//! [`RecoveringCredentials`] wraps the real credentials and hands them to every client (through
//! [`Credentials::from`], the crate's documented extension point for custom
//! [`CredentialsProvider`]s). It delegates each header request with a deadline; after a permanent
//! error or a deadline it builds the credentials again (a new token cache, a new fetch), with
//! exponential backoff between rebuilds so a still-missing binding costs one metadata request
//! per backoff step, not one per call. Every failure is counted
//! (`gcp_credentials_errors_total{kind}`, `gcp_credentials_rebuilds_total`), the transitions are
//! logged (warn when credentials start failing, info when they recover), and
//! [`GcpMetrics::credentials_failure`] says whether they are failing now (the operator's
//! `/readyz` turns unready on it; the `gcp_credentials_failing` gauge shows it too).

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use google_cloud_auth::{
    credentials::{CacheableResource, Credentials, CredentialsProvider},
    errors::CredentialsError,
};
use http::{Extensions, HeaderMap};

use crate::metrics::GcpMetrics;

/// What to build the credentials from, again after each failure.
pub type BuildCredentials = dyn Fn() -> Result<Credentials, CredentialsError> + Send + Sync;

/// Backoff between two rebuilds of failing credentials, and the deadline of one token request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryPolicy {
    /// Longest wait for headers (a token) from the wrapped credentials. A wait that runs out
    /// fails the call as transient and lets the credentials be rebuilt.
    pub token_timeout: Duration,
    /// Least time between the first two rebuilds; doubles after each rebuild that does not
    /// bring a token, up to `max_backoff`, and resets once a token arrives.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// While the credentials fail, they are asked for a token this often even when no call
    /// needs one, so the health signal (and the next rebuild) does not wait for traffic: a
    /// controller that parked an object after a permission error may not call again for minutes.
    pub probe_interval: Duration,
}

impl RecoveryPolicy {
    /// The policy for clients whose calls are bounded by `call_timeout`: a token must arrive
    /// within half of it (so the credentials' own deadline fires, and is reported as such,
    /// before the call's), rebuilds back off from 1 s to 4 s. The cap is below the probe
    /// interval, so every probe of failing credentials asks afresh and a fixed Workload
    /// Identity binding gives tokens within one probe (5 s), however long it was missing: the
    /// objects stalled on it are re-queued on that recovery. One metadata-server request per
    /// probe is what a node-local server answers without noticing.
    pub fn for_call_timeout(call_timeout: Duration) -> Self {
        Self {
            token_timeout: (call_timeout / 2).max(Duration::from_millis(10)),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(4),
            probe_interval: Duration::from_secs(5),
        }
    }
}

/// A [`CredentialsProvider`] that delegates to credentials it rebuilds when they fail.
/// Cheap to clone (one shared state).
#[derive(Clone)]
pub struct RecoveringCredentials {
    shared: Arc<Shared>,
}

struct Shared {
    build: Box<BuildCredentials>,
    policy: RecoveryPolicy,
    metrics: GcpMetrics,
    state: Mutex<State>,
    /// The universe domain, asked once (with the token deadline) and remembered: every client
    /// build asks for it, and a hanging metadata server must not cost a deadline per client.
    universe_domain: tokio::sync::Mutex<Option<Option<String>>>,
}

struct State {
    current: Credentials,
    /// Increments on every rebuild, so concurrent failures of one generation rebuild it once.
    generation: u64,
    /// Earliest time of the next rebuild (`None`: at once).
    next_rebuild: Option<Instant>,
    backoff: Duration,
    /// Since when, and why, the credentials have been failing (`None`: healthy).
    failing: Option<(Instant, String)>,
}

impl std::fmt::Debug for RecoveringCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.shared.state.lock().expect("credentials state poisoned");
        f.debug_struct("RecoveringCredentials")
            .field("generation", &state.generation)
            .field("failing", &state.failing.as_ref().map(|(_, why)| why))
            .finish_non_exhaustive()
    }
}

/// How one request for headers failed (the `kind` label of `gcp_credentials_errors_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The source said no and the auth library will not ask again by itself (403/404 from the
    /// metadata server, a rejected key): rebuilt after backoff.
    Permanent,
    /// The auth library retries by itself (connection refused, 5xx).
    Transient,
    /// No answer within [`RecoveryPolicy::token_timeout`]: rebuilt after backoff (its refresh
    /// task may be stuck on a connection that never answers).
    Timeout,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Permanent => "permanent",
            FailureKind::Transient => "transient",
            FailureKind::Timeout => "timeout",
        }
    }
}

impl RecoveringCredentials {
    /// Builds the credentials once now (an error here is returned: nothing to recover yet) and
    /// again with `build` whenever they fail permanently or time out.
    pub fn new(
        build: Box<BuildCredentials>,
        policy: RecoveryPolicy,
        metrics: GcpMetrics,
    ) -> Result<Self, CredentialsError> {
        let current = build()?;
        Ok(Self {
            shared: Arc::new(Shared {
                build,
                policy,
                metrics,
                state: Mutex::new(State {
                    current,
                    generation: 0,
                    next_rebuild: None,
                    backoff: policy.initial_backoff,
                    failing: None,
                }),
                universe_domain: tokio::sync::Mutex::new(None),
            }),
        })
    }

    /// Starts the probe ([`RecoveryPolicy::probe_interval`]): while the credentials fail, asks
    /// for a token now and then. Ends when the last clone of these credentials is dropped.
    pub fn spawn_probe(&self) {
        let weak = Arc::downgrade(&self.shared);
        let interval = self.shared.policy.probe_interval;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(shared) = weak.upgrade() else { return };
                let credentials = RecoveringCredentials { shared };
                let failing = credentials
                    .shared
                    .state
                    .lock()
                    .expect("credentials state poisoned")
                    .failing
                    .is_some();
                if failing {
                    let _ = credentials.headers(Extensions::new()).await;
                }
            }
        });
    }

    /// The wrapper as the `Credentials` Google's clients take.
    pub fn into_credentials(self) -> Credentials {
        Credentials::from(self)
    }

    fn current(&self) -> (Credentials, u64) {
        let state = self.shared.state.lock().expect("credentials state poisoned");
        (state.current.clone(), state.generation)
    }

    fn succeeded(&self) {
        let mut state = self.shared.state.lock().expect("credentials state poisoned");
        state.backoff = self.shared.policy.initial_backoff;
        state.next_rebuild = None;
        if let Some((since, _)) = state.failing.take() {
            self.shared.metrics.credentials_recovered();
            tracing::info!(
                failing_for = ?since.elapsed(),
                generation = state.generation,
                "GCP credentials recovered: tokens arrive again"
            );
        }
    }

    /// Records a failure of `generation`'s credentials; rebuilds them (returning the new ones)
    /// when `rebuild` is asked, nobody rebuilt that generation yet and the backoff allows.
    fn failed(
        &self,
        generation: u64,
        kind: FailureKind,
        message: &str,
        rebuild: bool,
    ) -> Option<Credentials> {
        let metrics = &self.shared.metrics;
        metrics.credentials_error(kind);
        let mut state = self.shared.state.lock().expect("credentials state poisoned");
        let now = Instant::now();
        match &mut state.failing {
            None => {
                tracing::warn!(
                    kind = kind.as_str(),
                    error = message,
                    "GCP credentials failing: no token for GCP calls (on GKE: check the Workload \
                     Identity binding of the operator's service account and the metadata server)"
                );
                state.failing = Some((now, format!("{}: {message}", kind.as_str())));
            }
            Some((_, why)) => {
                tracing::debug!(
                    kind = kind.as_str(),
                    error = message,
                    "GCP credentials still failing"
                );
                *why = format!("{}: {message}", kind.as_str());
            }
        }
        if let Some((since, why)) = &state.failing {
            metrics.credentials_failing(*since, why);
        }
        if !rebuild || generation != state.generation || state.next_rebuild.is_some_and(|at| now < at) {
            return None;
        }
        state.next_rebuild = Some(now + state.backoff);
        let backoff = state.backoff;
        state.backoff = (state.backoff * 2).min(self.shared.policy.max_backoff);
        match (self.shared.build)() {
            Ok(fresh) => {
                state.current = fresh.clone();
                state.generation += 1;
                metrics.credentials_rebuilt();
                tracing::warn!(
                    generation = state.generation,
                    next_rebuild_in = ?backoff,
                    "GCP credentials rebuilt after a {} failure",
                    kind.as_str()
                );
                Some(fresh)
            }
            Err(err) => {
                tracing::warn!(error = %err, next_rebuild_in = ?backoff, "GCP credentials: rebuilding failed");
                None
            }
        }
    }

    /// One request for headers to `credentials`, bounded by `deadline`.
    async fn try_headers(
        credentials: &Credentials,
        extensions: Extensions,
        deadline: Duration,
    ) -> Result<CacheableResource<HeaderMap>, (FailureKind, CredentialsError)> {
        match tokio::time::timeout(deadline, credentials.headers(extensions)).await {
            Ok(Ok(headers)) => Ok(headers),
            Ok(Err(err)) if err.is_transient() => Err((FailureKind::Transient, err)),
            Ok(Err(err)) => Err((FailureKind::Permanent, err)),
            Err(_) => Err((
                FailureKind::Timeout,
                CredentialsError::from_msg(
                    true,
                    format!(
                        "no token within {deadline:?}: the credentials source (on GKE: the metadata \
                         server) did not answer"
                    ),
                ),
            )),
        }
    }
}

impl CredentialsProvider for RecoveringCredentials {
    async fn headers(
        &self,
        extensions: Extensions,
    ) -> Result<CacheableResource<HeaderMap>, CredentialsError> {
        let started = Instant::now();
        let deadline = self.shared.policy.token_timeout;
        let (credentials, generation) = self.current();
        let (kind, err) = match Self::try_headers(&credentials, extensions.clone(), deadline).await {
            Ok(headers) => {
                self.succeeded();
                return Ok(headers);
            }
            Err(failure) => failure,
        };
        let rebuild = kind != FailureKind::Transient;
        let Some(fresh) = self.failed(generation, kind, &err.to_string(), rebuild) else {
            return Err(err);
        };
        // Fresh credentials: one more try within what is left of the deadline, so the first call
        // after a fix succeeds instead of reporting the old error once more.
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(err);
        }
        match Self::try_headers(&fresh, extensions, left).await {
            Ok(headers) => {
                self.succeeded();
                Ok(headers)
            }
            Err((kind, err)) => {
                // Counted, not rebuilt again: that waits for the backoff.
                self.failed(generation + 1, kind, &err.to_string(), false);
                Err(err)
            }
        }
    }

    async fn universe_domain(&self) -> Option<String> {
        let mut cached = self.shared.universe_domain.lock().await;
        if let Some(domain) = cached.as_ref() {
            return domain.clone();
        }
        let (credentials, _) = self.current();
        let deadline = self.shared.policy.token_timeout;
        let domain = match tokio::time::timeout(deadline, credentials.universe_domain()).await {
            Ok(domain) => domain,
            Err(_) => {
                tracing::warn!(
                    ?deadline,
                    "GCP credentials: no universe domain within the deadline (metadata server not \
                     answering?); using the default, googleapis.com"
                );
                None
            }
        };
        *cached = Some(domain.clone());
        domain
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Credentials whose every token request fails, permanently or not.
    #[derive(Debug)]
    struct Failing {
        transient: bool,
    }

    impl CredentialsProvider for Failing {
        async fn headers(&self, _: Extensions) -> Result<CacheableResource<HeaderMap>, CredentialsError> {
            Err(CredentialsError::from_msg(
                self.transient,
                "403 from the metadata server",
            ))
        }

        async fn universe_domain(&self) -> Option<String> {
            None
        }
    }

    fn counting(transient: bool, metrics: &GcpMetrics) -> (RecoveringCredentials, Arc<AtomicUsize>) {
        let builds = Arc::new(AtomicUsize::new(0));
        let counter = builds.clone();
        let policy = RecoveryPolicy {
            token_timeout: Duration::from_secs(1),
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(1),
            probe_interval: Duration::from_secs(60),
        };
        let build = move || {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(Credentials::from(Failing { transient }))
        };
        let credentials = RecoveringCredentials::new(Box::new(build), policy, metrics.clone()).unwrap();
        (credentials, builds)
    }

    #[tokio::test]
    async fn permanent_errors_rebuild_once_per_backoff_step() {
        let metrics = GcpMetrics::new();
        let (credentials, builds) = counting(false, &metrics);
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        // The first failure rebuilds at once; the next nine, within the backoff step, do not.
        for _ in 0..10 {
            assert!(credentials.headers(Extensions::new()).await.is_err());
        }
        assert_eq!(builds.load(Ordering::SeqCst), 2);
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(credentials.headers(Extensions::new()).await.is_err());
        assert_eq!(
            builds.load(Ordering::SeqCst),
            3,
            "rebuilt again after the backoff step"
        );
        assert_eq!(metrics.credential_rebuilds(), 2);
        // Each call after a rebuild also tried the fresh credentials once: 10 + 1 calls, 2 retries.
        assert_eq!(metrics.credential_errors(FailureKind::Permanent), 13);
        let failing = metrics.credentials_failure().expect("reported as failing");
        assert!(failing.contains("permanent"), "{failing}");
    }

    #[tokio::test]
    async fn transient_errors_are_counted_not_rebuilt() {
        let metrics = GcpMetrics::new();
        let (credentials, builds) = counting(true, &metrics);
        for _ in 0..3 {
            assert!(credentials.headers(Extensions::new()).await.is_err());
        }
        assert_eq!(
            builds.load(Ordering::SeqCst),
            1,
            "google-cloud-auth retries transient errors itself"
        );
        assert_eq!(metrics.credential_errors(FailureKind::Transient), 3);
        assert!(metrics.credentials_failure().is_some());
    }

    /// A token source that fails (as GKE's metadata server does while a Workload Identity
    /// binding is missing) until `bound` is set.
    #[derive(Debug)]
    struct Binding {
        bound: Arc<std::sync::atomic::AtomicBool>,
    }

    impl CredentialsProvider for Binding {
        async fn headers(&self, _: Extensions) -> Result<CacheableResource<HeaderMap>, CredentialsError> {
            if !self.bound.load(Ordering::SeqCst) {
                return Err(CredentialsError::from_msg(false, "403 from the metadata server"));
            }
            Ok(CacheableResource::New {
                entity_tag: Default::default(),
                data: HeaderMap::new(),
            })
        }

        async fn universe_domain(&self) -> Option<String> {
            None
        }
    }

    #[tokio::test]
    async fn a_recovery_is_signalled_once_when_tokens_arrive_again() {
        let metrics = GcpMetrics::new();
        let mut recoveries = metrics.credentials_recoveries();
        let bound = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let source = bound.clone();
        let build = move || {
            Ok(Credentials::from(Binding {
                bound: source.clone(),
            }))
        };
        let policy = RecoveryPolicy {
            token_timeout: Duration::from_secs(1),
            initial_backoff: Duration::ZERO,
            max_backoff: Duration::ZERO,
            probe_interval: Duration::from_secs(60),
        };
        let credentials = RecoveringCredentials::new(Box::new(build), policy, metrics.clone()).unwrap();
        assert!(credentials.headers(Extensions::new()).await.is_err());
        assert!(!recoveries.has_changed().unwrap(), "failing is no recovery");
        bound.store(true, Ordering::SeqCst);
        assert!(credentials.headers(Extensions::new()).await.is_ok());
        assert!(credentials.headers(Extensions::new()).await.is_ok());
        assert!(recoveries.has_changed().unwrap(), "the first token after failing");
        assert_eq!(
            *recoveries.borrow_and_update(),
            1,
            "signalled once, not per token"
        );
    }
}
