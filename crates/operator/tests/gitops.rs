//! GitOps status invariants of the three kinds that hold for every status a controller writes
//! (the api crate's `set_kstatus`, which every controller uses).
//!
//! Health itself is judged by the real code, not here: `crates/controller/tests/e2e/gitops_health.rs`
//! drives real objects through the controllers and has `tests/gitops-judge` (Go) judge them with
//! kstatus (sigs.k8s.io/cli-utils) and with deploy/argocd/argocd-cm.yaml's Lua run in gopher-lua
//! as Argo CD runs it (docs/gitops.md, "Expected health per state").

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use tpu_operator_api::conditions::{Progress, set_kstatus};

#[test]
fn controllers_never_publish_contradicting_conditions() {
    // kstatus checks Reconciling before Stalled and Argo CD's health.lua checks Stalled first;
    // they agree only because the two are never True together. set_kstatus guarantees it for
    // every Progress.
    for progress in [
        Progress::Ready,
        Progress::Reconciling,
        Progress::Stalled,
        Progress::Idle,
    ] {
        let mut c = Vec::new();
        set_kstatus(
            &mut c,
            progress,
            "Any",
            "sample message",
            Some(1),
            Time(Timestamp::now()),
        );
        let trues = c.iter().filter(|c| c.status == "True").count();
        assert!(trues <= 1, "{progress:?}: {c:?}");
        assert_eq!(
            c.len(),
            3,
            "Ready, Reconciling and Stalled are always all present"
        );
    }
}
