//! The emulated cloud's whole state behind one lock: what the services share ([`Cloud`]) and each
//! service's own resources, plus the loop that fires due timers into the service that owns them.
//! Transitions are evaluated lazily: before (and after) each request the world is "ticked" to the
//! clock's now, firing due timers in time order, each at its own due time, so a manual clock gives
//! fully deterministic histories.

use crate::clock::Clock;
use crate::cloud::{Cloud, TimerKind};
use crate::compute::ComputeState;
use crate::config::Config;
use crate::dataproc::Dataproc;
use crate::tpu::Tpu;
use crate::vertex::Vertex;
use chrono::{DateTime, Utc};
use std::sync::{Mutex, MutexGuard};

pub struct World {
    pub cloud: Cloud,
    pub tpu: Tpu,
    pub dataproc: Dataproc,
    pub vertex: Vertex,
    /// Compute Engine instances, templates, policies, MIGs, resize requests and operations.
    pub compute: ComputeState,
    /// IAM per identity (bindings, minted tokens); see [`crate::iam`].
    pub iam: crate::iam::Iam,
}

impl World {
    pub fn new(cfg: Config, now: DateTime<Utc>) -> Self {
        World {
            cloud: Cloud::new(cfg, now),
            tpu: Tpu::default(),
            dataproc: Dataproc::default(),
            vertex: Vertex::default(),
            compute: ComputeState::default(),
            iam: crate::iam::Iam::default(),
        }
    }

    /// Forgets every resource, operation, fault, call and minted token (configuration and IAM
    /// bindings are kept).
    pub fn reset(&mut self) {
        let cfg = self.cloud.cfg.clone();
        let mut iam = std::mem::take(&mut self.iam);
        iam.forget_tokens();
        *self = World::new(cfg, self.cloud.now);
        self.iam = iam;
    }

    /// Fires every timer due at or before `now`, in time order.
    pub fn tick(&mut self, now: DateTime<Utc>) {
        while let Some((seq, kind, key)) = self.cloud.next_due(now, None) {
            let w = &mut self.cloud;
            match kind {
                TimerKind::Node => crate::tpu::nodes::fire(w, &mut self.tpu, seq, &key),
                TimerKind::NodeWorkload => crate::tpu::nodes::fire_workload(w, &mut self.tpu, seq, &key),
                TimerKind::NodeUpdateOp => crate::tpu::nodes::fire_update_op(w, &mut self.tpu, &key),
                TimerKind::NodeMaintenance => {
                    crate::tpu::nodes::fire_maintenance(w, &mut self.tpu, seq, &key)
                }
                TimerKind::QueuedResource => crate::tpu::queued::fire(w, &mut self.tpu, seq, &key),
                TimerKind::Batch => crate::dataproc::batches::fire(w, &mut self.dataproc, seq, &key),
                TimerKind::Job => crate::vertex::jobs::fire(w, &mut self.vertex, seq, &key),
                TimerKind::Compute => crate::compute::fire(w, &mut self.compute, seq, &key),
            }
        }
        self.cloud.catch_up(now);
    }
}

/// State shared by the HTTP server, the admin API and the in-process [`crate::Emulator`] handle.
pub struct Shared {
    pub world: Mutex<World>,
    pub clock: Clock,
}

impl Shared {
    /// Locks the world and brings it up to the clock's now.
    pub fn world(&self) -> MutexGuard<'_, World> {
        let mut w = self.world.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.now();
        w.tick(now);
        w
    }
}
