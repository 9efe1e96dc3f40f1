//! A multislice of one queued resource per slice: a lost slice is counted once, deleted, asked
//! for again under its name; the others are told to stop meanwhile; a slice lost past
//! `maxSliceRestarts` ends the run with every queued resource deleted; the upgrade case (a
//! multislice status says runs as one queued resource) keeps that layout.

use super::*;
use tpu_operator_api::tpu_slice::MEGASCALE_COORDINATOR_METADATA;

/// A 3-slice Spot multislice; `restarts` / `replacing` as status says.
fn multislice(restarts: &[i32], replacing: &[i32]) -> Case {
    let mut c = Case::queued();
    c.slice.spec.multislice = Some(tpu_operator_api::tpu_slice::Multislice {
        node_count: 3,
        max_slice_restarts: Some(2),
    });
    c.slice.status = Some(TpuSliceStatus {
        slice_restarts: restarts.to_vec(),
        replacing_slices: replacing.to_vec(),
        ..Default::default()
    });
    c
}

impl Case {
    /// Every slice's queued resource in `states[k]` (`None`: absent), each ACTIVE one with a
    /// READY node that carries the coordinator.
    fn slices(mut self, states: &[Option<(&str, &str)>]) -> Self {
        let names = self.names();
        let queue = |k: usize| names.current.slice_queue(k).unwrap().to_string();
        let node_name = |k: usize| match k {
            0 => names.current.node.clone(),
            k => names.current.other_slices[k - 1].clone(),
        };
        let ready = |k: usize| {
            let mut n = self.node(S::Ready, H::Healthy).set_name(node_name(k));
            n.metadata
                .insert(MEGASCALE_COORDINATOR_METADATA.into(), "10.0.0.2:8080".into());
            n
        };
        let queues: Vec<Option<QueuedResource>> = states
            .iter()
            .enumerate()
            .map(|(k, s)| s.map(|(state, by)| qr(&queue(k), state, by)))
            .collect();
        let nodes: Vec<Option<Node>> = states
            .iter()
            .enumerate()
            .map(|(k, s)| s.filter(|(state, _)| *state == "ACTIVE").map(|_| ready(k)))
            .collect();
        self.observed.queued = queues[0].clone();
        self.observed.other_queues = queues[1..].to_vec();
        self.observed.node = nodes[0].clone();
        self.observed.other_slices = nodes[1..].to_vec();
        self
    }
}

const ACTIVE: Option<(&str, &str)> = Some(("ACTIVE", "USER"));
const SUSPENDED: Option<(&str, &str)> = Some(("SUSPENDED", "SERVICE"));

#[test]
fn a_multislice_is_one_queued_resource_per_slice_asked_for_one_per_pass() {
    let c = multislice(&[], &[]);
    let names = c.names();
    assert!(names.current.per_slice_queues());
    assert!(names.current.slice_queue(2).unwrap().ends_with("-s2"));
    let p = c.plan();
    assert_eq!(p.action, Action::CreateSliceQueuedResource(0));
    let p = multislice(&[], &[]).slices(&[ACTIVE, None, None]).plan();
    assert_eq!(p.action, Action::CreateSliceQueuedResource(1));
    assert!(
        p.verdict.said().message.starts_with("slice 1: "),
        "{}",
        p.verdict.said().message
    );
}

#[test]
fn a_lost_slice_is_counted_once_then_the_others_stop_then_it_is_deleted_and_asked_again() {
    let lost = [ACTIVE, SUSPENDED, ACTIVE];
    let p = multislice(&[], &[]).slices(&lost).plan();
    assert_eq!(p.action, Action::RecordSliceLoss(1));
    assert_eq!(p.verdict.phase, P::Recreating);
    let (counts, replacing) = slice_restarts(&[], &[], &Observed::default(), &p.action);
    assert_eq!((counts, replacing), (vec![0, 1], vec![1]));

    // Counted: slice 1 is now asked for under its next name; the queued resource it was lost in
    // is deleted first.
    let counted = |old_state: &str, current: Option<(&str, &str)>| {
        let mut c = multislice(&[0, 1], &[1]).slices(&[ACTIVE, current, ACTIVE]);
        let names = c.names();
        assert!(names.current.slice_queue(1).unwrap().ends_with("-s1r1"));
        let (k, old) = names.current.replaced[0].clone();
        assert!(k == 1 && old.ends_with("-s1"), "{old}");
        c.observed.replaced = vec![(1, Some(qr(&old, old_state, "SERVICE")))];
        c
    };
    let p = counted("SUSPENDED", None).plan();
    assert!(
        matches!(&p.action, Action::DeleteQueuedResource(n) if n.ends_with("-s1")),
        "{p:?}"
    );
    // While it is deleted, the replacement is asked for under the next name.
    assert_eq!(
        counted("DELETING", None).plan().action,
        Action::CreateSliceQueuedResource(1)
    );
    // Then the survivors' coordinator is taken off, one node per pass.
    let p = counted("DELETING", Some(("ACCEPTED", "USER"))).plan();
    match &p.action {
        Action::PatchSliceNode { node, patch, .. } => {
            assert!(node.ends_with("-s0"), "{node}");
            assert!(!patch.metadata.contains_key(MEGASCALE_COORDINATOR_METADATA));
        }
        other => panic!("{other:?}"),
    }
    // Stopped: the run waits for the replacement.
    let mut stopped = counted("DELETING", Some(("ACCEPTED", "USER")));
    let nodes = std::iter::once(&mut stopped.observed.node).chain(&mut stopped.observed.other_slices);
    for n in nodes.flatten() {
        n.metadata.remove(MEGASCALE_COORDINATOR_METADATA);
    }
    let p = stopped.plan();
    assert_eq!(p.action, Action::Nothing, "{p:?}");
    assert!(p.verdict.said().message.starts_with("slice 1: "), "{p:?}");
    // Asked: no longer pending once the lost one is going; pending while it still holds on.
    let asked = counted("DELETING", Some(("ACCEPTED", "USER")));
    let (_, replacing) = slice_restarts(&[0, 1], &[1], &asked.observed, &Action::Nothing);
    assert!(replacing.is_empty());
    let held = counted("SUSPENDED", Some(("ACCEPTED", "USER")));
    let (_, replacing) = slice_restarts(&[0, 1], &[1], &held.observed, &Action::Nothing);
    assert_eq!(replacing, [1]);
}

#[test]
fn a_slice_lost_past_its_limit_gives_the_run_up_and_deletes_every_queued_resource() {
    let p = multislice(&[0, 0, 2], &[])
        .slices(&[ACTIVE, ACTIVE, SUSPENDED])
        .plan();
    assert_eq!(p.action, Action::RecordSliceLoss(2));
    assert_eq!(p.verdict.said().reason, reasons::SLICE_RESTARTS_EXHAUSTED);
    assert_eq!(p.verdict.said().progress, Progress::Stalled);
    // Counted past the limit: sticky, each queued resource deleted, never asked again.
    let given_up = multislice(&[0, 0, 3], &[2]);
    let p = given_up.slices(&[ACTIVE, ACTIVE, SUSPENDED]).plan();
    assert!(
        matches!(&p.action, Action::DeleteQueuedResource(n) if n.ends_with("-s0")),
        "{p:?}"
    );
    let p = multislice(&[0, 0, 3], &[2]).plan();
    assert_eq!(p.action, Action::Nothing);
    assert_eq!(p.verdict.said().reason, reasons::SLICE_RESTARTS_EXHAUSTED);
    assert_eq!(p.verdict.phase, P::Failed);
}

#[test]
fn a_failed_slice_fails_the_run_and_the_others_are_deleted() {
    let p = multislice(&[], &[])
        .slices(&[ACTIVE, Some(("FAILED", "SERVICE")), ACTIVE])
        .plan();
    assert_eq!(p.verdict.phase, P::Failed);
    assert!(
        matches!(&p.action, Action::DeleteQueuedResource(n) if n.ends_with("-s0")),
        "{p:?}"
    );
}

/// An upgrade: a multislice status says runs as one queued resource (`multisliceParams`) keeps
/// that layout for its incarnation, so the operator neither loses nor duplicates it.
#[test]
fn a_multislice_running_as_one_queued_resource_keeps_that_layout() {
    let mut c = multislice(&[], &[]);
    let one = format!(
        "projects/p/locations/us-east5-b/queuedResources/{}",
        tpu_operator_api::naming::queued_resource_id(&Case::identity(), 0)
    );
    c.slice.status.as_mut().unwrap().queued_resource_name = Some(one.clone());
    let names = c.names();
    assert!(!names.current.per_slice_queues());
    assert_eq!(names.current.queued.as_deref(), Some(one.as_str()));
    assert_eq!(names.current.other_slices.len(), 2);
}
