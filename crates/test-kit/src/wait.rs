//! Waiting on objects in a [`TestEnv`]: poll the API server, and between polls advance the cloud
//! clock so the emulated resources' state machines move on. A limit in real time turns a hang
//! into a failure that shows the last object seen.

use std::time::Duration;

use crate::{NamespacedObject, TestEnv};

/// How long a wait may take in real time. Only a failing test ever waits this long, so the limit
/// is generous where the machine is slow for reasons outside the test: the real control plane
/// shares two cores with etcd, kube-controller-manager and parallel tests (60 s timed out there
/// under load), and a four-slice multislice beside two other builds timed out at 60 s against
/// kube-emulator too. `TPU_OPERATOR_E2E_WAIT_SECS` overrides both.
pub(crate) fn wait_limit(real_server: bool) -> Duration {
    let default = if real_server { 240 } else { 120 };
    let secs = std::env::var("TPU_OPERATOR_E2E_WAIT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    Duration::from_secs(secs)
}

impl TestEnv {
    /// Polls `name` until `pred` holds, advancing the emulator clock by `step` between polls, so
    /// cloud state machines progress. Panics with the last seen object after [`wait_limit`].
    pub async fn wait_for<K: NamespacedObject, F>(&self, name: &str, what: &str, step: Duration, pred: F) -> K
    where
        F: Fn(&K) -> bool,
    {
        self.wait_for_in(&self.ns, name, what, step, pred).await
    }

    /// [`Self::wait_for`] for an object of namespace `ns` (another team's, in the tenancy suites).
    pub async fn wait_for_in<K: NamespacedObject, F>(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        step: Duration,
        pred: F,
    ) -> K
    where
        F: Fn(&K) -> bool,
    {
        let api = kube::Api::<K>::namespaced(self.client.clone(), ns);
        let deadline = tokio::time::Instant::now() + self.wait_limit;
        let mut last = None;
        loop {
            if let Some(obj) = api.get_opt(name).await.expect("get object") {
                if pred(&obj) {
                    return obj;
                }
                last = Some(obj);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}; last seen: {last:#?}"
            );
            self.gcp.clock().advance(step);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Polls the Events about `regarding` until one has `reason`, and returns all of them then.
    /// Controllers publish a transition's Events after its status write, so a test that saw the
    /// status must wait for the Event rather than list once. Advances the clock like `wait_for`.
    pub async fn wait_for_event(
        &self,
        regarding: &str,
        reason: &str,
        step: Duration,
    ) -> Vec<k8s_openapi::api::events::v1::Event> {
        let api = self.api::<k8s_openapi::api::events::v1::Event>();
        let deadline = tokio::time::Instant::now() + self.wait_limit;
        loop {
            let events: Vec<_> = api
                .list(&Default::default())
                .await
                .expect("list events")
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding))
                .collect();
            if events.iter().any(|e| e.reason.as_deref() == Some(reason)) {
                return events;
            }
            let seen: Vec<_> = events.iter().filter_map(|e| e.reason.clone()).collect();
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for a {reason} event about {regarding}; seen: {seen:?}"
            );
            self.gcp.clock().advance(step);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Polls until the object is gone (finalizers done), advancing the clock like `wait_for`.
    pub async fn wait_gone<K: NamespacedObject>(&self, name: &str, step: Duration) {
        let api = self.api::<K>();
        let deadline = tokio::time::Instant::now() + self.wait_limit;
        while let Some(obj) = api.get_opt(name).await.expect("get object") {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for deletion of {obj:#?}"
            );
            self.gcp.clock().advance(step);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Lets the controllers run for `real` time while the cloud clock advances, e.g. to check
    /// that nothing else happens after convergence.
    pub async fn idle(&self, real: Duration, step: Duration) {
        let end = tokio::time::Instant::now() + real;
        while tokio::time::Instant::now() < end {
            self.gcp.clock().advance(step);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
