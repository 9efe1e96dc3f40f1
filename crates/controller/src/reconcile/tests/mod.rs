//! The shared pass alone, with a fake kind ([`fake`]): the order of its steps, what a refusal
//! skips, when the namespace's admission lock is let go, what a failed action still writes, and
//! the deletion pass's writes and Events. No API server and no cloud: the kinds' own suites
//! (tests/e2e) cover those.

mod fake;

use kube::runtime::controller::Action;
use tpu_operator_api::{TpuPolicy, TpuPolicySpec};

use self::fake::{FakeSpec, FakeStatus, context, deleting, fake, steps};
use super::{deletion, pass};
use crate::governance::tenancy::WithoutPolicy;

/// A full apply pass's steps up to its status write, in the order the pass owns.
const UNTIL_THE_WRITE: [&str; 8] = [
    "target",
    "first_look",
    "observe",
    "plan",
    "admission",
    "act",
    "report",
    "write",
];

fn strings(steps: &[&str]) -> Vec<String> {
    steps.iter().map(|s| (*s).to_owned()).collect()
}

/// A policy for namespace `team` with a budget: admissions there count usage, under the
/// namespace's lock.
fn budget() -> TpuPolicy {
    TpuPolicy::new(
        "team",
        TpuPolicySpec {
            namespaces: Some(vec!["team".into()]),
            max_spend_per_hour_usd: Some(100.0),
            ..TpuPolicySpec::default()
        },
    )
}

#[tokio::test]
async fn a_pass_runs_every_step_in_order_and_writes_status_once() {
    let (ctx, memory) = context(Vec::new(), WithoutPolicy::Allow).await;
    steps();
    let action = pass::apply(&fake("a", FakeSpec::default()), &ctx).await.unwrap();
    let mut order = strings(&UNTIL_THE_WRITE);
    order.extend(strings(&["event Phase", "event Acted", "wait"]));
    assert_eq!(steps(), order);
    let written = memory.writes();
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].status.phase, "Acted");
    assert_eq!(
        written[0].base.as_deref(),
        Some("1"),
        "conditional on the version the pass read"
    );
    assert!(!written[0].locked);
    assert_eq!(action, Action::requeue(ctx.config.poll_stable));
}

#[tokio::test]
async fn a_policy_refusal_stalls_the_object_before_any_cloud_read() {
    let (ctx, memory) = context(Vec::new(), WithoutPolicy::Deny).await;
    steps();
    let spec = FakeSpec {
        first_look: true,
        ..FakeSpec::default()
    };
    pass::apply(&fake("a", spec), &ctx).await.unwrap();
    assert_eq!(
        steps(),
        strings(&["target", "first_look", "write", "event Phase"])
    );
    assert_eq!(memory.writes()[0].status.phase, "Stalled");
}

#[tokio::test]
async fn a_target_that_cannot_be_acted_on_stalls_and_waits_for_a_change() {
    let (ctx, memory) = context(Vec::new(), WithoutPolicy::Allow).await;
    steps();
    let spec = FakeSpec {
        stop: true,
        ..FakeSpec::default()
    };
    let action = pass::apply(&fake("a", spec), &ctx).await.unwrap();
    assert_eq!(steps(), strings(&["target", "write", "event Phase"]));
    assert_eq!(memory.writes()[0].status.phase, "Stalled");
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn the_admission_lock_is_held_through_the_status_write_and_let_go_after_it() {
    let (ctx, memory) = context(vec![budget()], WithoutPolicy::Allow).await;
    let spec = FakeSpec {
        counted: true,
        ..FakeSpec::default()
    };
    pass::apply(&fake("a", spec), &ctx).await.unwrap();
    let written = memory.writes();
    assert_eq!(written.len(), 1);
    assert!(
        written[0].locked,
        "a concurrent admission in the namespace must wait until the create is in status"
    );
    assert!(
        ctx.tenancy.try_enter("team").is_ok(),
        "the lock is let go once the pass has written"
    );
    // Without a counted admission the lock is never taken.
    pass::apply(&fake("b", FakeSpec::default()), &ctx).await.unwrap();
    assert!(!memory.writes()[1].locked);
}

#[tokio::test]
async fn a_failed_action_writes_its_status_and_events_then_returns_the_error() {
    let (ctx, memory) = context(Vec::new(), WithoutPolicy::Allow).await;
    steps();
    let spec = FakeSpec {
        fail_act: true,
        ..FakeSpec::default()
    };
    let err = pass::apply(&fake("a", spec), &ctx).await.unwrap_err();
    assert!(err.to_string().contains("create the fake"), "{err}");
    let mut expected = strings(&UNTIL_THE_WRITE);
    expected.extend(strings(&["event Phase", "event Acted"]));
    assert_eq!(steps(), expected, "no wait is registered for a failed pass");
    assert_eq!(memory.writes().len(), 1);
}

#[tokio::test]
async fn a_pass_that_finds_the_status_it_would_write_writes_nothing() {
    let (ctx, memory) = context(Vec::new(), WithoutPolicy::Allow).await;
    let mut obj = fake("a", FakeSpec::default());
    pass::apply(&obj, &ctx).await.unwrap();
    // The object as the first pass left it.
    obj.status = Some(memory.writes()[0].status.clone());
    pass::apply(&obj, &ctx).await.unwrap();
    assert_eq!(memory.writes().len(), 1, "the same status is not written twice");
    assert_eq!(
        memory.events(),
        ["Phase", "Acted", "Acted"],
        "only the action's own Event repeats"
    );
}

#[tokio::test]
async fn deletion_runs_through_the_hooks_writes_while_pending_and_publishes_each_event_once() {
    let (ctx, memory) = context(Vec::new(), WithoutPolicy::Allow).await;
    steps();
    let mut obj = deleting(fake("a", FakeSpec::default()));
    let pending = deletion::cleanup(&obj, &ctx).await.unwrap();
    assert!(pending.is_some(), "cloud objects remain: the finalizer stays");
    // The same hooks as an apply pass, without the policy; the kind's own Events (what it did:
    // a cancel) go after the status write, by the pass.
    assert_eq!(
        steps(),
        strings(&[
            "target",
            "observe",
            "plan",
            "act",
            "released",
            "report",
            "write",
            "event Phase",
            "event Cancelling",
            "wait"
        ])
    );
    obj.status = Some(FakeStatus {
        phase: "Deleting".into(),
        ..FakeStatus::default()
    });
    let done = deletion::cleanup(&obj, &ctx).await.unwrap();
    assert!(done.is_none(), "nothing left: the finalizer may go");
    deletion::cleaned_up(&obj, &ctx).await.unwrap();
    // Released: no status write; what it waited on is dropped (the wait is read, not registered).
    assert_eq!(
        steps(),
        strings(&[
            "target",
            "observe",
            "plan",
            "act",
            "released",
            "wait",
            "event CleanedUp"
        ])
    );
    assert_eq!(memory.events(), ["Phase", "Cancelling", "CleanedUp"]);
    assert_eq!(memory.writes().len(), 1);
}

#[tokio::test]
async fn a_refused_deletion_call_is_written_then_returned_and_the_finalizer_stays() {
    let (ctx, memory) = context(Vec::new(), WithoutPolicy::Allow).await;
    steps();
    let spec = FakeSpec {
        fail_act: true,
        ..FakeSpec::default()
    };
    let mut obj = deleting(fake("a", spec));
    // Even a pass whose plan says nothing is left is not released while its call was refused.
    obj.status = Some(FakeStatus {
        phase: "Deleting".into(),
        ..FakeStatus::default()
    });
    let err = deletion::cleanup(&obj, &ctx).await.unwrap_err();
    assert!(err.to_string().contains("create the fake"), "{err}");
    assert_eq!(
        steps(),
        strings(&["target", "observe", "plan", "act", "report", "write"])
    );
    assert_eq!(
        memory.writes().len(),
        1,
        "the refusal is in status before the error"
    );
}

#[tokio::test]
async fn a_newer_releases_status_fields_go_back_with_a_write_and_alone_cause_none() {
    let (ctx, memory) = context(Vec::new(), WithoutPolicy::Allow).await;
    let mut obj = fake("a", FakeSpec::default());
    pass::apply(&obj, &ctx).await.unwrap();
    // A newer release wrote a field this one does not know.
    let newer = serde_json::json!({"goodputPercent": 97});
    let mut read = memory.writes()[0].status.clone();
    read.newer_fields
        .insert("fromANewerRelease".into(), newer.clone());
    obj.status = Some(read);
    pass::apply(&obj, &ctx).await.unwrap();
    assert_eq!(
        memory.writes().len(),
        1,
        "a field this release does not know is no reason to write"
    );
    // A write this release makes for its own reasons sends it back.
    obj.status.as_mut().unwrap().phase = "Older".into();
    pass::apply(&obj, &ctx).await.unwrap();
    let written = memory.writes();
    assert_eq!(written.len(), 2);
    assert_eq!(
        written[1].status.newer_fields.get("fromANewerRelease"),
        Some(&newer)
    );
}
