//! The summary's figures of the `--multislice` and `--maintenance` steps: what each run's step
//! saw (`MultisliceSeen`, `MaintenanceSeen`), added up over the runs of a backend, and the line
//! that prints them.

use std::collections::BTreeMap;

use tpu_operator_reliability::crash::{self, How, MultisliceSeen};

/// What the multislice steps saw (`--multislice`).
#[derive(Default)]
pub struct Multisliced {
    /// Runs with a multislice step, by their number of slices.
    runs: BTreeMap<u32, u64>,
    /// Slices lost (one per step), and of those the steps that ended (Ready again, counted once).
    lost: u64,
    ended: u64,
    /// Lost slices by the creates of their queued resource after the loss: 0, 1, more.
    creates: BTreeMap<usize, u64>,
    /// Creates and deletes on the surviving slices, from convergence to the step's end.
    survivor_creates: usize,
    survivor_deletes: usize,
    /// Kill points of the steps: before the loss, while it was counted and replaced, after.
    kills: [u64; 3],
}

impl Multisliced {
    pub fn add(&mut self, m: &MultisliceSeen) {
        *self.runs.entry(m.slices).or_default() += 1;
        self.lost += 1;
        self.ended += u64::from(m.ended);
        *self.creates.entry(m.lost_creates).or_default() += 1;
        self.survivor_creates += m.survivor_creates;
        self.survivor_deletes += m.survivor_deletes;
        for (sum, k) in self.kills.iter_mut().zip(m.kills) {
            *sum += u64::from(k);
        }
    }

    pub fn line(&self) -> String {
        format!(
            "multislice: {} runs {:?} (slices: runs), {} slices lost; creates per lost slice after its loss {:?} (creates: slices); {} creates and {} deletes on surviving slices; {} steps ended (Ready again, sliceRestarts 1); kill points in the steps {} before the loss, {} while it was counted and replaced, {} after",
            self.runs.values().sum::<u64>(),
            self.runs,
            self.lost,
            self.creates,
            self.survivor_creates,
            self.survivor_deletes,
            self.ended,
            self.kills[0],
            self.kills[1],
            self.kills[2]
        )
    }
}

/// What the maintenance steps saw (`--maintenance`).
#[derive(Default)]
pub struct Maintained {
    /// Runs with a maintenance step: announced, simulated; and of those, the ones whose slice's
    /// status showed it over.
    announced: u64,
    simulated: u64,
    ended: u64,
    /// Announced windows by the checkpoint requests (metadata patches) made for them: 0, 1, more.
    requests: BTreeMap<usize, u64>,
    /// Metadata patches on the nodes of simulated (unannounced) maintenances.
    simulated_patches: usize,
    /// Announced windows that may be moved, and of those the ones started early, by their
    /// successful early starts: 0, 1, more.
    reschedulable: u64,
    early_starts: BTreeMap<usize, u64>,
    /// Early start calls on windows that may not be moved or were not announced (should be 0),
    /// and refused early start calls.
    wrong_starts: usize,
    refused_starts: usize,
    /// Early starts through a queued resource (`performMaintenanceQueuedResource`).
    queued_starts: usize,
    /// Sums of the maintenance restarts and the recreations counted by the steps.
    restarts: i64,
    recreations: i64,
}

impl Maintained {
    pub fn add(&mut self, m: &crash::MaintenanceSeen) {
        match m.how {
            How::Announced => {
                self.announced += 1;
                *self.requests.entry(m.checkpoint_patches).or_default() += 1;
            }
            How::Simulated => {
                self.simulated += 1;
                self.simulated_patches += m.checkpoint_patches;
            }
        }
        if m.reschedulable {
            self.reschedulable += 1;
            *self.early_starts.entry(m.early_starts).or_default() += 1;
        } else {
            self.wrong_starts += m.start_calls;
        }
        self.refused_starts += m.start_calls - m.early_starts;
        self.queued_starts += m.queued_starts;
        self.ended += u64::from(m.ended);
        self.restarts += i64::from(m.restarts_counted);
        self.recreations += i64::from(m.recreations_counted);
    }

    pub fn line(&self) -> String {
        format!(
            "maintenance: {} announced + {} simulated, {} seen over in status; checkpoint requests per announced window {:?} (requests: runs); {} metadata patches on simulated ones; {} reschedulable windows, early starts per window {:?} (starts: windows), {} of them through a queued resource, {} start calls on windows that may not move, {} refused start calls; {} maintenance restarts counted, {} recreations",
            self.announced,
            self.simulated,
            self.ended,
            self.requests,
            self.simulated_patches,
            self.reschedulable,
            self.early_starts,
            self.queued_starts,
            self.wrong_starts,
            self.refused_starts,
            self.restarts,
            self.recreations
        )
    }
}
