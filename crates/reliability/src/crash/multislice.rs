//! The multislice step of a run (`CrashConfig::multislice`, `crash-bench --multislice`): once the
//! run's Spot multislice (2–4 slices, one queued resource per slice) converged, the node of one
//! slice, drawn, is preempted, and the operator is killed at random points before the loss, while
//! the loss is counted, while the slice is replaced alone, and after. The step ends once the
//! slice is Ready again with every node READY and the lost slice's `status.sliceRestarts` at 1,
//! or after [`MAX_TICKS`] ticks.
//!
//! What it checks, beside the per-tick "no duplicate slice" check (`invariants::duplicate_slices`:
//! at most one queued resource per slice not being deleted): the lost slice's queued resource is
//! created exactly once after the loss (by id: a create replayed after a lost reply is refused
//! as already there), the other slices' queued resources and nodes are neither created nor
//! deleted from convergence to the step's end, and the loss is counted once, on that slice
//! alone, never as a whole-run recreation.

use kube::ResourceExt;
use rand::Rng;

use tpu_operator_api::tpu_slice::{TpuSlice, TpuSlicePhase, TpuSliceStatus};

use super::driver::Run;
use crate::{invariants, world::Snapshot};

/// Ticks (15 s of cloud time each) the replacement may take before the step gives up on it: a
/// slice's provisioning in the emulator is about 20.
const MAX_TICKS: u32 = 120;

/// What one run's multislice step saw.
#[derive(Clone, Debug, Default)]
pub struct MultisliceSeen {
    /// Slices in the multislice.
    pub slices: u32,
    /// The slice whose node was preempted.
    pub lost: u32,
    /// Queued resources (and nodes) of the lost slice created after the loss, by id.
    pub lost_creates: usize,
    /// Creates and deletes of the other slices' queued resources and nodes, from convergence
    /// to the step's end.
    pub survivor_creates: usize,
    pub survivor_deletes: usize,
    /// `status.sliceRestarts` at the step's end.
    pub slice_restarts: Vec<i32>,
    /// `status.recreations` after the step minus before (a whole-run recreation).
    pub recreations_counted: i32,
    /// Kills performed before the loss, while it was counted and the slice replaced, and after.
    pub kills: [u32; 3],
    /// Whether the step finished: Ready again, every node READY, the lost slice counted.
    pub ended: bool,
}

impl Run<'_> {
    /// The multislice step, each of its parts under `lo..=hi` kills (0..=`hi` before the loss
    /// and after the replacement). Records violations; returns what it saw, or `None` when the
    /// slice was not a multislice with a node to preempt.
    pub(super) async fn multislice(&mut self, lo: u32, hi: u32) -> Option<MultisliceSeen> {
        let slice = self.world.api::<TpuSlice>().get("s").await.ok()?;
        let slices = u32::try_from(slice.spec.multislice.as_ref()?.node_count).ok()?;
        let before = slice.status?;
        // Status names slice 0's node, `<parent>/nodes/<id>-s0`.
        let (id, _) = before.node_name.as_deref()?.rsplit_once('-')?;
        let prefix = id.rsplit('/').next().unwrap_or(id).to_owned();
        let lost = self.rng.random_range(0..slices);
        let since = self.world.gcp.calls().len();
        let start = self.kills;
        self.ticks_under_kills("multislice before loss", hi).await;
        let at_loss = (self.world.gcp.calls().len(), self.kills);
        let ended = self
            .lose_and_replace(&format!("{id}-s{lost}"), lost, lo, hi)
            .await?;
        let replaced_at = self.kills;
        if ended {
            self.ticks_under_kills("after replacement", hi).await;
        }

        let after = slice_status(self).await.unwrap_or_default();
        let all = invariants::slice_writes(&self.world.gcp, since, &prefix);
        let since_loss = invariants::slice_writes(&self.world.gcp, at_loss.0, &prefix);
        let others = all.iter().filter(|(j, _)| **j != lost).map(|(_, w)| w);
        let seen = MultisliceSeen {
            slices,
            lost,
            lost_creates: since_loss.get(&lost).map_or(0, |w| w.creates.len()),
            survivor_creates: others.clone().map(|w| w.creates.len()).sum(),
            survivor_deletes: others.map(|w| w.deletes).sum(),
            slice_restarts: after.slice_restarts.clone(),
            recreations_counted: after.recreations - before.recreations,
            kills: [
                at_loss.1 - start,
                replaced_at - at_loss.1,
                self.kills - replaced_at,
            ],
            ended,
        };
        self.check_multislice(&seen);
        Some(seen)
    }

    /// Preempts `node` (slice `lost`'s), then drives the clock under `lo..=hi` kills until the
    /// loss is counted, and again until the slice is Ready again (at most [`MAX_TICKS`]).
    /// Returns whether it was; `None` when the node could not be preempted (recorded).
    async fn lose_and_replace(&mut self, node: &str, lost: u32, lo: u32, hi: u32) -> Option<bool> {
        let preempt = gcp_emulator::Fault::PreemptNode {
            name: node.to_owned(),
        };
        if let Err(e) = self.world.gcp.inject(preempt) {
            self.violations.push(format!(
                "multislice: slice {lost}'s node could not be preempted: {e:?}"
            ));
            return None;
        }
        let k = lost as usize;
        let kills = self.rng.random_range(lo..=hi);
        self.phase("slice loss", kills, |s| {
            restarts(s).get(k).is_some_and(|r| *r >= 1)
        })
        .await;
        let kills = self.rng.random_range(lo..=hi);
        let mut ticks = 0;
        let last = self
            .phase("slice replacement", kills, |s| {
                ticks += 1;
                replaced(s, k) || ticks > MAX_TICKS
            })
            .await;
        let ended = last.as_ref().is_some_and(|s| replaced(s, k));
        if last.is_some() && !ended {
            self.violations.push(format!(
                "slice replacement: slice {lost} not Ready again within {MAX_TICKS} ticks"
            ));
        }
        Some(ended)
    }

    /// 1–8 ticks with 0..=`hi` kills: the operator restarted while nothing is to be done
    /// (before the loss) or just after the replacement (the coordinator told again).
    async fn ticks_under_kills(&mut self, name: &str, hi: u32) {
        let ticks = self.rng.random_range(1..=8u32);
        let kills = self.rng.random_range(0..=hi);
        let mut n = 0;
        self.phase(name, kills, |_| {
            n += 1;
            n > ticks
        })
        .await;
    }

    fn check_multislice(&mut self, seen: &MultisliceSeen) {
        let k = seen.lost as usize;
        let mut v = Vec::new();
        if seen.lost_creates > 1 || (seen.ended && seen.lost_creates != 1) {
            v.push(format!(
                "slice {k}'s queued resource created {} times after its loss",
                seen.lost_creates
            ));
        }
        if seen.survivor_creates + seen.survivor_deletes > 0 {
            v.push(format!(
                "the other slices' queued resources or nodes: {} created, {} deleted after convergence",
                seen.survivor_creates, seen.survivor_deletes
            ));
        }
        let counted = |j: usize| seen.slice_restarts.get(j).copied().unwrap_or(0);
        let others = (0..seen.slices as usize).any(|j| j != k && counted(j) != 0);
        if others || counted(k) > 1 || (seen.ended && counted(k) != 1) {
            v.push(format!(
                "slice {k} lost once, sliceRestarts {:?}",
                seen.slice_restarts
            ));
        }
        if seen.recreations_counted != 0 {
            v.push(format!(
                "one slice lost counted as {} whole-run recreations",
                seen.recreations_counted
            ));
        }
        for s in v {
            self.violations
                .push(format!("multislice ({} slices, lost {k}): {s}", seen.slices));
        }
    }
}

/// `status.sliceRestarts` of slice `s` in `snap`.
fn restarts(snap: &Snapshot) -> Vec<i32> {
    slice_of(snap)
        .and_then(|o| o.status.as_ref())
        .map(|st| st.slice_restarts.clone())
        .unwrap_or_default()
}

/// Slice `s` Ready again after slice `k` was replaced: its loss counted, no slice pending
/// replacement, every node READY.
fn replaced(snap: &Snapshot, k: usize) -> bool {
    let st = slice_of(snap).and_then(|o| o.status.as_ref());
    st.is_some_and(|st| {
        st.phase == TpuSlicePhase::Ready
            && st.slice_restarts.get(k).is_some_and(|r| *r >= 1)
            && st.replacing_slices.is_empty()
            && !st.node_states.is_empty()
            && st.node_states.iter().all(|n| n == "READY")
    })
}

fn slice_of(snap: &Snapshot) -> Option<&TpuSlice> {
    snap.slices.iter().find(|o| o.name_any() == "s")
}

/// Slice `s`'s status now.
async fn slice_status(run: &Run<'_>) -> Option<TpuSliceStatus> {
    let api = run.world.api::<TpuSlice>();
    api.get("s").await.ok().and_then(|s| s.status)
}
