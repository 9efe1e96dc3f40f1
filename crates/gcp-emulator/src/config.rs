//! Emulator configuration: durations of every state transition (emulated time), identities and
//! server defaults. All durations are realistic by default; tests usually keep them and drive a
//! manual clock, or shorten them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Durations of the simulated transitions, in emulated time. Serialized as humantime strings
/// (`"3m"`, `"90s"`) in the admin API.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Durations {
    /// TPU node CREATING -> READY (the create operation completes at READY).
    #[serde(with = "humantime_serde_compat")]
    pub tpu_create: Duration,
    /// TPU node DELETING -> gone.
    #[serde(with = "humantime_serde_compat")]
    pub tpu_delete: Duration,
    /// TPU node STOPPING -> STOPPED.
    #[serde(with = "humantime_serde_compat")]
    pub tpu_stop: Duration,
    /// TPU node STARTING -> READY.
    #[serde(with = "humantime_serde_compat")]
    pub tpu_start: Duration,
    /// TPU node patch operation duration.
    #[serde(with = "humantime_serde_compat")]
    pub tpu_update: Duration,
    /// Simulated TPU VM workload: READY node with `tpu-operator-done-uri` metadata -> `_SUCCESS`.
    #[serde(with = "humantime_serde_compat")]
    pub tpu_workload: Duration,
    /// Simulated training workloads (TPU VM workloads and running Vertex jobs): interval between
    /// two checkpoints written under their `CHECKPOINT_DIR` while they run (`0s`: none, as a hung
    /// run would). See `outputs::write_checkpoint_to` and the step model in `training.rs`.
    #[serde(with = "humantime_serde_compat")]
    pub workload_checkpoint: Duration,
    /// A TPU node maintenance event started by v2alpha1 `nodes.simulateMaintenanceEvent`:
    /// ONGOING (health UNHEALTHY_MAINTENANCE) -> over (HEALTHY, workload restarted).
    #[serde(with = "humantime_serde_compat")]
    pub maintenance: Duration,
    /// Queued resource CREATING -> ACCEPTED (the create operation completes here).
    #[serde(with = "humantime_serde_compat")]
    pub qr_accept: Duration,
    /// ACCEPTED -> WAITING_FOR_RESOURCES.
    #[serde(with = "humantime_serde_compat")]
    pub qr_queue: Duration,
    /// WAITING_FOR_RESOURCES -> PROVISIONING once capacity exists (also the re-check interval).
    #[serde(with = "humantime_serde_compat")]
    pub qr_wait: Duration,
    /// PROVISIONING -> ACTIVE (nodes CREATING -> READY).
    #[serde(with = "humantime_serde_compat")]
    pub qr_provision: Duration,
    /// SUSPENDING -> SUSPENDED after a preemption.
    #[serde(with = "humantime_serde_compat")]
    pub qr_suspend: Duration,
    /// DELETING -> gone.
    #[serde(with = "humantime_serde_compat")]
    pub qr_delete: Duration,
    /// Dataproc batch PENDING -> RUNNING.
    #[serde(with = "humantime_serde_compat")]
    pub batch_pending: Duration,
    /// Dataproc batch RUNNING -> SUCCEEDED/FAILED.
    #[serde(with = "humantime_serde_compat")]
    pub batch_run: Duration,
    /// Dataproc batch CANCELLING -> CANCELLED.
    #[serde(with = "humantime_serde_compat")]
    pub batch_cancel: Duration,
    /// Vertex job QUEUED -> PENDING (0 by default: real create answers JOB_STATE_PENDING).
    #[serde(with = "humantime_serde_compat")]
    pub job_queued: Duration,
    /// Vertex job PENDING -> RUNNING.
    #[serde(with = "humantime_serde_compat")]
    pub job_pending: Duration,
    /// Vertex job RUNNING -> SUCCEEDED/FAILED.
    #[serde(with = "humantime_serde_compat")]
    pub job_run: Duration,
    /// Vertex job CANCELLING -> CANCELLED.
    #[serde(with = "humantime_serde_compat")]
    pub job_cancel: Duration,
    /// Compute instance PROVISIONING -> STAGING (a stocked-out insert fails at this point).
    #[serde(with = "humantime_serde_compat")]
    pub instance_provision: Duration,
    /// Compute instance STAGING -> RUNNING (the insert operation is DONE at RUNNING).
    #[serde(with = "humantime_serde_compat")]
    pub instance_stage: Duration,
    /// Compute instance STOPPING -> gone (delete) or TERMINATED (preempted with action STOP).
    #[serde(with = "humantime_serde_compat")]
    pub instance_stop: Duration,
    /// Compute operations that only change configuration (templates, resource policies, MIG
    /// insert, resize request cancel / delete): RUNNING -> DONE.
    #[serde(with = "humantime_serde_compat")]
    pub compute_op: Duration,
    /// MIG resize request CREATING -> ACCEPTED (its insert operation is DONE here).
    #[serde(with = "humantime_serde_compat")]
    pub resize_accept: Duration,
}

impl Default for Durations {
    fn default() -> Self {
        let s = Duration::from_secs;
        Durations {
            tpu_create: s(180),
            tpu_delete: s(60),
            tpu_stop: s(60),
            tpu_start: s(90),
            tpu_update: s(5),
            tpu_workload: s(600),
            workload_checkpoint: s(120),
            maintenance: s(300),
            qr_accept: s(10),
            qr_queue: s(20),
            qr_wait: s(60),
            qr_provision: s(180),
            qr_suspend: s(30),
            qr_delete: s(60),
            batch_pending: s(60),
            batch_run: s(120),
            batch_cancel: s(30),
            job_queued: s(0),
            job_pending: s(60),
            job_run: s(300),
            job_cancel: s(30),
            instance_provision: s(60),
            instance_stage: s(30),
            instance_stop: s(30),
            compute_op: s(2),
            resize_accept: s(5),
        }
    }
}

/// Emulator configuration.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    pub durations: Durations,
    /// Project id -> project number. Unlisted projects get a stable 12-digit number derived from
    /// the id (see [`Config::project_number`]).
    pub project_numbers: BTreeMap<String, u64>,
    /// Dataproc runtime version used when the batch names none.
    pub dataproc_default_runtime: String,
    /// `Batch.creator` (real: the caller's email).
    pub creator: String,
    /// Write simulated workload outputs into the storage emulator.
    pub simulate_outputs: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            durations: Durations::default(),
            project_numbers: BTreeMap::new(),
            dataproc_default_runtime: "2.2".to_string(),
            creator: "emulator@example.com".to_string(),
            simulate_outputs: true,
        }
    }
}

impl Config {
    /// The project number for `project` (a configured one, the id itself when numeric, or a
    /// stable FNV-1a derived 12-digit number).
    pub fn project_number(&self, project: &str) -> u64 {
        if let Some(n) = self.project_numbers.get(project) {
            return *n;
        }
        if let Ok(n) = project.parse::<u64>() {
            return n;
        }
        let mut h: u64 = 0xcbf29ce484222325;
        for b in project.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100000001b3);
        }
        100_000_000_000 + h % 900_000_000_000
    }
}

/// serde adapter: `Duration` <-> humantime string (`"3m"`), also accepting a number of seconds.
pub(crate) mod humantime_serde_compat {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Secs(f64),
            Text(String),
        }
        match Repr::deserialize(d)? {
            Repr::Secs(s) if s >= 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
            Repr::Secs(s) => Err(serde::de::Error::custom(format!("invalid duration {s}"))),
            Repr::Text(t) => humantime::parse_duration(&t).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_numbers_are_stable_and_12_digits() {
        let c = Config::default();
        let n = c.project_number("my-proj");
        assert_eq!(n, c.project_number("my-proj"));
        assert_eq!(n.to_string().len(), 12);
        assert_eq!(c.project_number("123456789012"), 123456789012);
    }

    #[test]
    fn durations_round_trip_as_text_and_seconds() {
        let d: Durations = serde_json::from_str(r#"{"tpuCreate":"2m","batchRun":5}"#).unwrap();
        assert_eq!(d.tpu_create, Duration::from_secs(120));
        assert_eq!(d.batch_run, Duration::from_secs(5));
        assert_eq!(d.tpu_delete, Durations::default().tpu_delete);
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["tpuCreate"], "2m");
    }
}
