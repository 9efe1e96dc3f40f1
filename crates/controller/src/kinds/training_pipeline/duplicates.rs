//! More than one Vertex job for one training attempt.
//!
//! `customJobs.create` takes no request id, so the operator finds an attempt's job by its labels
//! before creating one. That is exactly-once only if the list shows every job the moment it is
//! created and every create's reply arrives. A create whose reply is lost (the job exists, the
//! operator never learned its name) followed by a list that does not show it yet ends in a second
//! job for the same attempt, both billing. They are told apart here once a list shows both: the
//! oldest (by `createTime`, then name) is kept, since it has run longest, and the others are to be
//! cancelled. Does not touch Kubernetes or Google Cloud.

use std::cmp::Ordering;

use tpu_operator_gcp::aiplatform_v1::model::CustomJob;

use super::plan::cancel_stops_billing;

/// The jobs of one attempt, sorted: the one to keep, and the others.
#[derive(Debug, Default, PartialEq)]
pub struct Split {
    pub kept: Option<CustomJob>,
    /// The other jobs of the attempt that still run (or wait) and so must be cancelled.
    /// Terminal ones (including those already cancelling) are left for cleanup to delete.
    pub to_cancel: Vec<CustomJob>,
}

/// Oldest first: `createTime`, then name (a job without `createTime` sorts last).
fn age_order(a: &CustomJob, b: &CustomJob) -> Ordering {
    let key = |j: &CustomJob| {
        j.create_time
            .as_ref()
            .map_or((i64::MAX, i32::MAX), |t| (t.seconds(), t.nanos()))
    };
    key(a).cmp(&key(b)).then_with(|| a.name.cmp(&b.name))
}

/// Splits one attempt's jobs. `jobs` may hold the same job twice (a listing and a `get`): the
/// first copy wins, so callers put the authoritative read first.
pub fn split(jobs: Vec<CustomJob>) -> Split {
    let mut unique: Vec<CustomJob> = Vec::with_capacity(jobs.len());
    for job in jobs {
        if !unique.iter().any(|j| j.name == job.name) {
            unique.push(job);
        }
    }
    unique.sort_by(age_order);
    let mut jobs = unique.into_iter();
    let kept = jobs.next();
    Split {
        kept,
        to_cancel: jobs.filter(|j| cancel_stops_billing(&j.state)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use tpu_operator_gcp::wkt::Timestamp;

    use super::*;
    use tpu_operator_gcp::aiplatform_v1::model::JobState;

    fn job(id: &str, created: i64, state: JobState) -> CustomJob {
        CustomJob::new()
            .set_name(format!("projects/1/locations/us-east5/customJobs/{id}"))
            .set_create_time(Timestamp::clamp(created, 0))
            .set_state(state)
    }

    fn ids(jobs: &[CustomJob]) -> Vec<&str> {
        jobs.iter().map(|j| j.name.rsplit('/').next().unwrap()).collect()
    }

    #[test]
    fn the_oldest_job_is_kept_and_the_running_others_cancelled() {
        let s = split(vec![
            job("9", 300, JobState::Running),
            job("7", 100, JobState::Running),
            job("8", 200, JobState::Pending),
            job("6", 400, JobState::Cancelled),
        ]);
        assert_eq!(ids(&[s.kept.unwrap()]), ["7"]);
        assert_eq!(
            ids(&s.to_cancel),
            ["8", "9"],
            "oldest first; cancelled ones are left"
        );
    }

    #[test]
    fn equal_create_times_fall_back_to_the_name_and_copies_count_once() {
        let s = split(vec![
            job("2", 100, JobState::Running),
            job("1", 100, JobState::Running),
            job("2", 100, JobState::Queued),
        ]);
        assert_eq!(ids(&[s.kept.unwrap()]), ["1"]);
        assert_eq!(ids(&s.to_cancel), ["2"]);
        assert_eq!(s.to_cancel[0].state, JobState::Running, "the first copy wins");
    }

    #[test]
    fn one_job_or_none_is_no_duplicate() {
        let one = split(vec![job("1", 100, JobState::Running)]);
        assert!(one.kept.is_some() && one.to_cancel.is_empty());
        assert_eq!(split(Vec::new()), Split::default());
    }
}
