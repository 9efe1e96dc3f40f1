//! A controller [`Context`] against gcp-emulator, as an operator process builds one at start-up:
//! new GCP clients, the emulator's clock (TTLs and timeouts run at the cloud's pace, manual or
//! scaled), and poll intervals in real time that only bound how quickly a run converges.

use std::{sync::Arc, time::Duration};

use tpu_operator_controller::{
    Context, ControllerConfig,
    governance::tenancy::{Policies, WithoutPolicy},
    runtime::{backoff::BackoffPolicy, clock::FnClock},
};
use tpu_operator_gcp::{CredentialsMode, Gcp, GcpConfig, GcpError, GcpMetrics};

/// How fast the in-process controllers poll and back off (real time).
#[derive(Clone, Debug)]
pub struct Polls {
    pub active: Duration,
    pub stable: Duration,
    pub capacity: Duration,
    /// Backstop poll of an object the cloud watch covers.
    pub watched: Duration,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl Polls {
    /// What the e2e and reliability suites use: a test converges in milliseconds of real time.
    pub fn fast() -> Self {
        Self {
            active: Duration::from_millis(20),
            stable: Duration::from_millis(500),
            capacity: Duration::from_millis(50),
            watched: Duration::from_millis(500),
            backoff_base: Duration::from_millis(20),
            backoff_max: Duration::from_millis(400),
        }
    }
}

/// What differs between the harnesses' contexts; everything else is [`ControllerConfig`]'s.
#[derive(Clone, Debug)]
pub struct ContextSpec {
    pub cluster_id: String,
    pub default_project: String,
    /// The only namespace the controllers (and the policy watch) see; `None` = all.
    pub namespace: Option<String>,
    pub concurrency: u16,
    pub polls: Polls,
    /// Watch TpuPolicy objects (in `namespace`) and enforce them; `None` leaves tenancy off, as
    /// a `Context` without [`Context::with_policies`].
    pub tenancy: Option<WithoutPolicy>,
}

/// Failure to build the GCP clients of a context.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("gcp-emulator URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("building the GCP clients: {0}")]
    Gcp(#[from] GcpError),
}

impl ContextSpec {
    /// The context, with its GCP clients pointed at `gcp`.
    pub async fn build(
        &self,
        client: &kube::Client,
        gcp: &gcp_emulator::Emulator,
    ) -> Result<Context, ContextError> {
        self.build_via(client, gcp, &gcp.url()).await
    }

    /// As [`Self::build`], with the GCP calls sent to `gcp_url` (e.g. a fault-injecting proxy in
    /// front of `gcp`) while the clock still reads `gcp`'s.
    pub async fn build_via(
        &self,
        client: &kube::Client,
        gcp: &gcp_emulator::Emulator,
        gcp_url: &str,
    ) -> Result<Context, ContextError> {
        self.build_metered(client, gcp, gcp_url, GcpMetrics::new()).await
    }

    /// As [`Self::build_via`], with the GCP clients reporting to `metrics` (e.g. metrics that
    /// hold `local`'s paused clock while a call is in flight).
    pub async fn build_metered(
        &self,
        client: &kube::Client,
        gcp: &gcp_emulator::Emulator,
        gcp_url: &str,
        metrics: GcpMetrics,
    ) -> Result<Context, ContextError> {
        let config = GcpConfig::emulator(parse_url(gcp_url)?);
        self.build_with(client, gcp, config, metrics).await
    }

    /// As [`Self::build`], with the GCP clients sending `credentials` ([`CredentialsMode::Custom`]:
    /// a token source a test can make fail as GKE's metadata server does, and fix).
    pub async fn build_credentialed(
        &self,
        client: &kube::Client,
        gcp: &gcp_emulator::Emulator,
        credentials: CredentialsMode,
    ) -> Result<Context, ContextError> {
        let mut config = GcpConfig::emulator(parse_url(&gcp.url())?);
        config.credentials = credentials;
        self.build_with(client, gcp, config, GcpMetrics::new()).await
    }

    async fn build_with(
        &self,
        client: &kube::Client,
        gcp: &gcp_emulator::Emulator,
        gcp_config: GcpConfig,
        metrics: GcpMetrics,
    ) -> Result<Context, ContextError> {
        let clients = Gcp::connect(gcp_config, metrics).await?;
        let config = ControllerConfig {
            cluster_id: self.cluster_id.clone(),
            default_project: Some(self.default_project.clone()),
            namespace: self.namespace.clone(),
            concurrency: self.concurrency,
            poll_active: self.polls.active,
            poll_stable: self.polls.stable,
            poll_capacity: self.polls.capacity,
            watch_lists: true,
            poll_watched: self.polls.watched,
            poll_checkpoints: ControllerConfig::default().poll_checkpoints,
            // Suites that need Kueue turn it on in the built context (`ctx.config.kueue`).
            kueue: false,
            kueue_default_queue: None,
            // The production pacing: suites that test it change `ctx.config.create_limits`
            // before the context is built.
            create_limits: ControllerConfig::default().create_limits,
            // The emulator's clock is moved by the tests, not by a rate.
            cloud_time_scale: 1.0,
        };
        let clock = gcp.clock();
        // Impersonated tokens expire in the emulator's time, not the host's.
        let token_clock = clock.clone();
        clients
            .impersonation
            .set_clock(Arc::new(move || token_clock.now()));
        let mut ctx = Context::new(client.clone(), clients, config)
            .with_holdings(tpu_operator_controller::kinds::holdings())
            .with_clock(Arc::new(FnClock(move || clock.now())))
            .with_backoff(BackoffPolicy {
                base: self.polls.backoff_base,
                max: self.polls.backoff_max,
            });
        if let Some(without_policy) = self.tenancy {
            ctx = ctx.with_policies(Policies::watch(
                client.clone(),
                self.namespace.as_deref(),
                without_policy,
            ));
        }
        Ok(ctx)
    }
}

/// The emulator URL in whatever type [`GcpConfig::emulator`] takes (the GCP crate's HTTP client's).
fn parse_url<U>(url: &str) -> Result<U, ContextError>
where
    U: std::str::FromStr,
    U::Err: std::fmt::Display,
{
    url.parse().map_err(|e: U::Err| ContextError::Url {
        url: url.to_owned(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{emulators, start_time};

    fn spec(namespace: Option<&str>) -> ContextSpec {
        ContextSpec {
            cluster_id: "kit".into(),
            default_project: "kit-project".into(),
            namespace: namespace.map(str::to_owned),
            concurrency: 2,
            polls: Polls::fast(),
            tenancy: None,
        }
    }

    #[tokio::test]
    async fn the_context_reads_the_emulators_clock_and_scopes_to_the_namespace() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let kube = emulators::kube_with_crds().unwrap();
        let client = kube::Client::new(kube.router(), "default");
        let gcp = emulators::gcp_manual(start_time()).await;
        let ctx = spec(Some("team-a")).build(&client, &gcp).await.unwrap();
        assert_eq!(ctx.clock.now(), start_time());
        gcp.clock().advance(Duration::from_secs(90));
        assert_eq!(ctx.clock.now(), start_time() + chrono::Duration::seconds(90));
        assert_eq!(ctx.config.namespace.as_deref(), Some("team-a"));
        assert_eq!(ctx.config.poll_active, Polls::fast().active);
    }

    #[tokio::test]
    async fn a_bad_endpoint_is_an_error_naming_it() {
        let kube = emulators::kube_with_crds().unwrap();
        let client = kube::Client::new(kube.router(), "default");
        let gcp = emulators::gcp_manual(start_time()).await;
        let Err(err) = spec(None).build_via(&client, &gcp, "not a url").await else {
            panic!("a context from an unparsable endpoint");
        };
        assert!(err.to_string().contains("\"not a url\""), "{err}");
    }
}
