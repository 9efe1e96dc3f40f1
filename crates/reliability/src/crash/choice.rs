//! What a seed picks for its run (backend, capacity, training, flow), and what that run's
//! objects may create.

use rand::{Rng, rngs::StdRng};

use super::{CrashConfig, Flow, Plans};
use crate::{
    fixtures::{self, Backend, Capacity, Training},
    invariants::Expected,
};

/// What a seed picks for its run.
pub(super) struct Choice {
    pub(super) backend: Backend,
    pub(super) capacity: Capacity,
    pub(super) training: Training,
    pub(super) flow: Flow,
}

/// The seed's choices, drawn from `rng` always in the same order (a seed replays its run).
pub(super) fn choose(seed: u64, cfg: &CrashConfig, rng: &mut StdRng) -> Choice {
    let backend = match cfg.backend {
        _ if cfg.maintenance || cfg.multislice => Backend::TpuApi,
        Some(b) => b,
        None if seed.is_multiple_of(2) => Backend::TpuApi,
        None => Backend::ComputeEngine,
    };
    let capacity = if cfg.multislice {
        Capacity::SpotMultislice(rng.random_range(2..=4))
    } else if cfg.maintenance {
        Capacity::MAINTAINED[rng.random_range(0..Capacity::MAINTAINED.len())]
    } else {
        capacity_of(backend, cfg.plans, rng)
    };
    // A TPU VM pipeline's training slice: a spot node, or a single-host or multi-host spot
    // slice on Compute Engine.
    let training_slice = match backend {
        Backend::TpuApi => Capacity::SpotNode,
        Backend::ComputeEngine if rng.random_bool(0.5) => Capacity::ComputeSpot,
        Backend::ComputeEngine => Capacity::ComputeMultiHost,
    };
    // A maintenance run's slice trains for hours of cloud time (`fixtures::checkpointing`), and
    // a TPU VM pipeline on the same emulator would too: its pipeline trains on Vertex.
    let training = if rng.random_bool(0.5) || cfg.vertex_faults || cfg.maintenance {
        Training::Vertex
    } else {
        Training::TpuVm(training_slice)
    };
    // A maintenance run converges first: its node is maintained between create and update; so
    // does a multislice run, one of whose slices is lost then.
    let flow = if rng.random_bool(0.75) || cfg.maintenance || cfg.multislice {
        Flow::Lifecycle
    } else {
        Flow::EarlyDelete
    };
    Choice {
        backend,
        capacity,
        training,
        flow,
    }
}

/// The slice's capacity: one of the backend's, with or without its plans, or a plan alone, as
/// `plans` says. One draw either way, so a seed's later choices do not depend on it.
fn capacity_of(backend: Backend, plans: Plans, rng: &mut StdRng) -> Capacity {
    let all: &[Capacity] = match backend {
        Backend::TpuApi => &Capacity::TPU_API,
        Backend::ComputeEngine => &Capacity::COMPUTE_ENGINE,
    };
    let from: Vec<Capacity> = all
        .iter()
        .copied()
        .filter(|c| match plans {
            Plans::Drawn => true,
            Plans::Only => c.is_plan(),
            Plans::Never => !c.is_plan(),
        })
        .collect();
    from[rng.random_range(0..from.len())]
}

/// The most cloud resources the run's slice, batch and pipeline may create.
pub(super) fn expected_for(capacity: Capacity, training: Training, cfg: &CrashConfig) -> Expected {
    let vertex_faults = cfg.vertex_faults;
    let mut owned = capacity.owns();
    if cfg.multislice {
        // The lost slice's replacement: one queued resource more.
        owned.queued += 1;
    }
    let trains_on = match training {
        Training::TpuVm(c) => c.owns(),
        Training::Vertex => fixtures::Owned::default(),
    };
    Expected {
        nodes: owned.nodes + trains_on.nodes,
        queued: owned.queued + trains_on.queued,
        instances: owned.instances + trains_on.instances,
        groups: owned.groups + trains_on.groups,
        resize_requests: owned.resize_requests + trains_on.resize_requests,
        batches: 1 + usize::from(training == Training::Vertex),
        // Under Vertex faults duplicates are made by design; what counts is none left running.
        jobs: if vertex_faults {
            usize::MAX
        } else {
            usize::from(training == Training::Vertex)
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capacities(cfg: &CrashConfig, seeds: std::ops::Range<u64>) -> Vec<(Backend, Capacity)> {
        seeds
            .map(|seed| {
                let c = choose(seed, cfg, &mut crate::rng(seed));
                (c.backend, c.capacity)
            })
            .collect()
    }

    #[test]
    fn plans_only_draws_the_backends_plan_every_time() {
        let cfg = CrashConfig {
            plans: Plans::Only,
            ..CrashConfig::default()
        };
        for (backend, capacity) in capacities(&cfg, 0..40) {
            assert!(capacity.is_plan(), "{capacity:?}");
            assert_eq!(capacity.backend(), backend, "{capacity:?}");
        }
    }

    #[test]
    fn plans_never_draws_no_plan() {
        let cfg = CrashConfig {
            plans: Plans::Never,
            ..CrashConfig::default()
        };
        for (_, capacity) in capacities(&cfg, 0..200) {
            assert!(!capacity.is_plan(), "{capacity:?}");
        }
    }

    #[test]
    fn maintenance_runs_draw_tpu_api_nodes_and_converge_first() {
        let cfg = CrashConfig {
            maintenance: true,
            ..CrashConfig::default()
        };
        for seed in 0..40 {
            let c = choose(seed, &cfg, &mut crate::rng(seed));
            assert_eq!(c.backend, Backend::TpuApi, "seed {seed}");
            assert!(Capacity::MAINTAINED.contains(&c.capacity), "{:?}", c.capacity);
            assert_eq!(c.flow, Flow::Lifecycle, "seed {seed}");
            assert_eq!(c.training, Training::Vertex, "seed {seed}");
        }
    }

    #[test]
    fn multislice_runs_draw_spot_multislices_of_two_to_four_and_converge_first() {
        let cfg = CrashConfig {
            multislice: true,
            ..CrashConfig::default()
        };
        let mut counts = std::collections::BTreeSet::new();
        for seed in 0..40 {
            let c = choose(seed, &cfg, &mut crate::rng(seed));
            assert_eq!(c.backend, Backend::TpuApi, "seed {seed}");
            let Capacity::SpotMultislice(n) = c.capacity else {
                panic!("seed {seed}: {:?}", c.capacity);
            };
            assert!((2..=4).contains(&n), "seed {seed}: {n} slices");
            counts.insert(n);
            assert_eq!(c.flow, Flow::Lifecycle, "seed {seed}");
            // Every slice once, and the lost one once more.
            let expected = expected_for(c.capacity, c.training, &cfg);
            assert_eq!(expected.queued, n as usize + 1, "seed {seed}");
            assert_eq!(expected.nodes, usize::from(c.training != Training::Vertex));
        }
        assert_eq!(counts.len(), 3, "2, 3 and 4 slices all drawn: {counts:?}");
    }

    #[test]
    fn ordinary_runs_draw_plans_among_the_other_capacities() {
        let drawn = capacities(&CrashConfig::default(), 0..200);
        for plan in Capacity::PLANS {
            assert!(drawn.iter().any(|(_, c)| *c == plan), "{plan:?} never drawn");
        }
        assert!(drawn.iter().any(|(_, c)| !c.is_plan()));
    }
}
