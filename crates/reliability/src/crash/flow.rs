//! The steps of a run after its objects exist: converge and update
//! ([`Flow::Lifecycle`](super::Flow::Lifecycle)), or delete early
//! ([`Flow::EarlyDelete`](super::Flow::EarlyDelete)); then delete everything and look for leaks.

use std::time::Duration;

use kube::{
    ResourceExt,
    api::{Patch, PatchParams},
};
use rand::Rng;
use serde_json::json;
use tpu_operator_api::{PreprocessBatch, TpuSlice, TrainingPipeline, tpu_slice::CHECKPOINT_REQUEST_METADATA};

use super::{STEP, driver::Run};
use crate::{
    fixtures::{self, Backend, Capacity, Training},
    invariants::{self, Violations},
    world::{Snapshot, World},
};

impl Run<'_> {
    /// Starts the operator and creates the slice, the batch and the pipeline.
    pub(super) async fn create_objects(&mut self, capacity: Capacity, training: Training) {
        self.world.start_operator().await;
        let mut slice = fixtures::slice("s", capacity);
        if self.cfg.maintenance {
            // A container that trains and checkpoints into its CHECKPOINT_DIR: what the operator
            // asks for a checkpoint before a maintenance, and whose commit it waits for to start
            // a reschedulable one early.
            fixtures::checkpointing(&mut slice, self.world);
        } else if self.cfg.multislice {
            // A workload on the nodes: something the operator stops while a lost slice is replaced.
            slice.spec.startup_script =
                Some(format!("#!/bin/bash\n# watches {CHECKPOINT_REQUEST_METADATA}\n"));
        }
        self.world.create(&slice).await;
        self.world.create(&fixtures::batch("b")).await;
        self.world.create(&fixtures::pipeline("p", training)).await;
    }

    /// [`Flow::Lifecycle`](super::Flow::Lifecycle): converges under `kills` kills, checks, then runs [`update`].
    pub(super) async fn converge_then_update(&mut self, kills: u32, capacity: Capacity, lo: u32, hi: u32) {
        let created = self.phase("create", kills, |s| invariants::converged(s, 3)).await;
        if let Some(snap) = created {
            self.look_for_two_rungs("after create");
            if let Some(v) = plan_not_landed(&snap, capacity) {
                self.violations.push(format!("after create: {v}"));
            }
            let dup = invariants::live_duplicates(&self.world.gcp);
            self.duplicates += dup.0.len();
            for v in dup.0 {
                self.violations.push(format!("after create: {v}"));
            }
            for v in settled_inconsistencies(self.world).await.0 {
                self.violations.push(format!("after create: {v}"));
            }
            if self.cfg.maintenance {
                self.maintenance = self.maintenance(lo, hi).await;
                for v in settled_inconsistencies(self.world).await.0 {
                    self.violations.push(format!("after maintenance: {v}"));
                }
            }
            if self.cfg.multislice {
                self.multislice = self.multislice(lo, hi).await;
                for v in settled_inconsistencies(self.world).await.0 {
                    self.violations.push(format!("after multislice: {v}"));
                }
            }
            update(self, capacity.backend(), lo, hi).await;
        }
    }

    /// [`Flow::EarlyDelete`](super::Flow::EarlyDelete): lets the creates get under way (and crash in them) for random ticks.
    pub(super) async fn early_create(&mut self) {
        let ticks = self.rng.random_range(0..40u32);
        let kill_after = self.rng.random_range(0..=1);
        let mut n = 0;
        self.phase("early create", kill_after, |_| {
            n += 1;
            n > ticks
        })
        .await;
    }

    /// Deletes everything under kills; what is still there when the phase runs out is stuck.
    pub(super) async fn delete_everything(&mut self, lo: u32, hi: u32) {
        // The pipeline first: its children go by garbage collection.
        self.world.delete::<TrainingPipeline>("p").await;
        self.world.delete::<TpuSlice>("s").await;
        self.world.delete::<PreprocessBatch>("b").await;
        let kills = self.rng.random_range(lo..=hi);
        let gone = self.phase("delete", kills, Snapshot::is_empty).await;
        if gone.is_none() {
            let snap = self.world.snapshot().await;
            for v in invariants::stuck(&snap).0 {
                self.violations.push(format!("after delete: {v}"));
            }
        }
    }

    /// Records leaks and duplicate creates once the cloud's deletes finished; the number of leaks.
    pub(super) async fn leaks_and_duplicate_creates(&mut self) -> usize {
        // Let delete operations finish in the cloud (DELETING → gone), then look for leaks.
        for _ in 0..40 {
            self.world.advance(STEP);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.look_for_two_rungs("after delete");
        let leaks = invariants::leftovers(&self.world.gcp);
        let leak_count = leaks.0.len();
        self.violations.extend(leaks);
        let dup = invariants::duplicate_creates(&self.world.gcp, self.expected);
        self.duplicates += dup.0.len();
        self.violations.extend(dup);
        leak_count
    }
}

/// The update flow: new labels on the slice (a `nodes.patch`, or nothing for a queued slice;
/// on Compute Engine, where admission refuses label changes, a `maxRunDuration` the slice
/// stays within: a new generation and no cloud call), and a 1 s TTL on the finished pipeline
/// (its cloud resources are reaped).
async fn update(run: &mut Run<'_>, backend: Backend, lo: u32, hi: u32) {
    let labels = match backend {
        Backend::TpuApi => json!({"spec": {"labels": {"team": "research"}}}),
        Backend::ComputeEngine => json!({"spec": {"maxRunDuration": "24h"}}),
    };
    run.world
        .api::<TpuSlice>()
        .patch("s", &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .expect("patch slice labels");
    let ttl = json!({"spec": {"ttlSecondsAfterFinished": 1}});
    run.world
        .api::<TrainingPipeline>()
        .patch("p", &PatchParams::default(), &Patch::Merge(&ttl))
        .await
        .expect("patch pipeline ttl");
    let kills = run.rng.random_range(lo..=hi);
    let updated = run
        .phase("update", kills, |s| {
            let slice_done = s.slices.iter().filter(|o| o.name_any() == "s").all(|o| {
                o.status.as_ref().is_some_and(|st| {
                    st.observed_generation == o.metadata.generation
                        && st.phase == tpu_operator_api::tpu_slice::TpuSlicePhase::Ready
                })
            });
            let reaped = s
                .pipelines
                .iter()
                .all(|p| p.status.as_ref().is_some_and(|st| st.reaped_time.is_some()));
            slice_done && reaped
        })
        .await;
    if updated.is_some() {
        run.look_for_two_rungs("after update");
        for v in settled_inconsistencies(run.world).await.0 {
            run.violations.push(format!("after update: {v}"));
        }
    }
}

/// A planned slice Ready anywhere but the rung and zone it must land on (its earlier rungs have
/// no capacity): the run would not have gone through the plan's moves it is meant to test.
fn plan_not_landed(snap: &Snapshot, capacity: Capacity) -> Option<String> {
    let (rung, zone) = capacity.landing()?;
    let slice = snap.slices.iter().find(|o| o.name_any() == "s")?;
    let plan = slice.status.as_ref().and_then(|st| st.capacity_plan.as_ref());
    let at = plan.map(|p| (p.rung, p.zone.as_str(), p.moves));
    // Each rung here has one zone, so the slice moved once per rung it left.
    if at == Some((rung, zone, rung)) {
        return None;
    }
    Some(format!(
        "planned slice {capacity:?} Ready at (rung, zone, moves) {at:?}, not ({rung}, {zone:?}, {rung})"
    ))
}

/// Status-versus-cloud inconsistencies that persist: a snapshot is not atomic (a reconcile may
/// sit between its cloud call and its status write), so a finding counts only if it is still
/// there 300 ms later with the cloud clock frozen.
pub async fn settled_inconsistencies(world: &World) -> Violations {
    let first = invariants::status_consistent(&world.snapshot().await, &world.gcp);
    if first.is_empty() {
        return first;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = invariants::status_consistent(&world.snapshot().await, &world.gcp);
    Violations(second.0.into_iter().filter(|v| first.0.contains(v)).collect())
}
