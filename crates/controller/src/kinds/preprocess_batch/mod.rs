//! The PreprocessBatch controller: one Dataproc Serverless batch per attempt.
//!
//! Observe reads the current attempt's batch by its deterministic name and its output once it
//! succeeded; act makes at most one Dataproc call (the pass's order: [`crate::reconcile::pass`]).
//! The batch's create operation stays open for the whole Spark run, so progress is read from the
//! batch itself, never by waiting on the operation. Deletion runs through the same hooks
//! ([`crate::reconcile::deletion`]): on an object being deleted they list (or name) its batches
//! and cancel or delete one per pass.
//!
//! Files: [`observe`], [`plan`], [`act`], [`status`] (+ [`events`], [`cost`]), [`spec`] (spec →
//! `Batch` request).

pub mod act;
pub mod cost;
pub mod events;
pub mod holding;
pub mod observe;
pub mod plan;
pub mod policy;
pub mod spec;
pub mod status;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use tpu_operator_api::{
    common::{CostEstimate, DeletionPolicy},
    conditions::reasons,
    naming::ObjectIdentity,
    preprocess_batch::{PreprocessBatch, PreprocessBatchPhase, PreprocessBatchStatus},
};
use tpu_operator_gcp::dataproc_v1::model::{Batch, batch::State as BatchState};

use self::{
    act::SubmitOutcome,
    observe::{BatchLookup, Observed, Target},
    plan::{Action, Plan, Requeue},
};
use crate::{
    governance::tenancy,
    reconcile::{
        context::Context,
        driver,
        handles::{Io, Settings},
        kind::{Acted, Admission, Kind, OwnedHolder, Pass, Stop, WriteAhead},
        report::Transition,
        wait::{Wait, Watch},
    },
    runtime::{
        cloud_watch::Listable,
        config::ControllerConfig,
        error::{ReconcileError, Result},
        shutdown::Shutdown,
    },
};

/// Runs the controller until `shutdown` resolves.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    driver::run::<PreprocessBatch>(ctx, shutdown).await;
}

/// What a pass's one Dataproc call did.
pub enum Done {
    /// No call, or a deletion's cancel or delete (they return nothing the status reports).
    Nothing,
    /// The batch of `attempt` was submitted (or found, or refused).
    Submitted {
        attempt: u32,
        outcome: Box<SubmitOutcome>,
    },
}

impl Kind for PreprocessBatch {
    const KIND: &'static str = "PreprocessBatch";
    const FIELD_MANAGER: &'static str = status::FIELD_MANAGER;
    const SETTLES: bool = true;
    type Status = PreprocessBatchStatus;
    type Target = Target;
    type Observed = Observed;
    type Action = plan::Action;
    type Phase = PreprocessBatchPhase;
    type Details = plan::Details;
    type Done = Done;

    fn status(&self) -> Option<&PreprocessBatchStatus> {
        self.status.as_ref()
    }

    fn conditions(status: &PreprocessBatchStatus) -> &[Condition] {
        &status.conditions
    }

    fn spend(status: &PreprocessBatchStatus) -> Option<&CostEstimate> {
        status.estimated_cost.as_ref()
    }

    /// The object's identity and Dataproc location.
    fn target(&self, settings: Settings<'_>) -> Result<Result<Target, Stop>> {
        let identity = ObjectIdentity::new(
            self.namespace()
                .ok_or(ReconcileError::MissingMetadata("namespace"))?,
            self.name_any(),
            self.uid().ok_or(ReconcileError::MissingMetadata("uid"))?,
        );
        let Some(project) = settings.project_for(&identity.namespace, self.spec.project.as_deref()) else {
            return Ok(Err(Stop {
                reason: reasons::INVALID_SPEC,
                message: "spec.project is not set and the operator has no default project".into(),
            }));
        };
        Ok(Ok(Target {
            identity,
            parent: format!("projects/{project}/locations/{}", self.spec.region),
        }))
    }

    /// Tenancy policy (project, region, service account, network) before the first cloud read.
    fn first_look(&self, _settings: Settings<'_>, t: &Target) -> Vec<tenancy::Request> {
        let never_submitted = self.status.as_ref().is_none_or(|s| s.attempts == 0);
        if never_submitted {
            vec![request(self, t)]
        } else {
            Vec::new()
        }
    }

    async fn observe(&self, io: &Io<'_>, t: &Target) -> Result<Observed> {
        if self.deleting() {
            return observe::observe_deletion(io, t, self.status.as_ref()).await;
        }
        let old = self.status.clone().unwrap_or_default();
        observe::observe(io, t, &self.spec, &old).await
    }

    fn plan(&self, now: DateTime<Utc>, _t: &Target, observed: &Observed) -> Plan {
        // Only a deletion pass observes what is left.
        if let Some(remaining) = &observed.remaining {
            return plan::plan_deletion(remaining);
        }
        let old = self.status.clone().unwrap_or_default();
        plan::plan(&self.spec.batch, &old, observed, now)
    }

    /// And before every submit.
    fn admission(&self, _settings: Settings<'_>, t: &Target, plan: &Plan) -> Option<Admission> {
        matches!(plan.action, Action::Submit { .. }).then(|| Admission {
            checked: vec![request(self, t)],
            counted: Vec::new(),
            holder: OwnedHolder::default(),
        })
    }

    async fn act(
        &self,
        io: &Io<'_>,
        t: &Target,
        _observed: &Observed,
        plan: &Plan,
        _ahead: &mut dyn WriteAhead<Self::Status>,
    ) -> Result<Acted<Done>> {
        let attempt = match &plan.action {
            Action::Nothing => return Ok(Acted::done(Done::Nothing)),
            Action::Submit { attempt, .. } => *attempt,
            // Deletion's calls: an error ends the pass before any status is written.
            Action::Cancel { operation } => {
                act::cancel(io, operation).await?;
                return Ok(Acted::done(Done::Nothing));
            }
            Action::Delete { batch } => {
                act::delete(io, batch).await?;
                return Ok(Acted::done(Done::Nothing));
            }
        };
        let outcome = act::submit(io, t, &self.spec, attempt).await?;
        let failed = match &outcome {
            SubmitOutcome::Refused {
                refused: Some(err), ..
            } => Some(ReconcileError::gcp("create Dataproc batch")(err.as_ref().clone())),
            _ => None,
        };
        Ok(Acted {
            failed,
            ..Acted::done(Done::Submitted {
                attempt,
                outcome: Box::new(outcome),
            })
        })
    }

    fn report(&self, now: DateTime<Utc>, pass: &Pass<'_, Self>) -> PreprocessBatchStatus {
        status::report(self, pass.observed, pass.plan, pass.done, now)
    }

    /// The batch this pass saw (or just submitted), watched while it changes by itself.
    fn wait(&self, config: &ControllerConfig, pass: &Pass<'_, Self>, _new: &PreprocessBatchStatus) -> Wait {
        if self.deleting() {
            // Deletion polls at the verdict's (active) interval and watches nothing.
            return Wait::after(pass.plan.verdict.requeue.after(config));
        }
        let mut seen = match &pass.observed.batch {
            BatchLookup::Found(b) => Some((b.name.clone(), b.state.clone())),
            _ => None,
        };
        let next = match pass.done {
            // No call made: when the plan said to look again.
            Done::Nothing => pass.plan.verdict.requeue,
            Done::Submitted { attempt, outcome } => match outcome.as_ref() {
                // Nothing was sent: no batch to watch, and the turn says when to look again.
                SubmitOutcome::Paced { after, .. } => Requeue::After(*after),
                SubmitOutcome::Refused { .. } => {
                    seen = Some((pass.target.batch_name(*attempt), BatchState::Pending));
                    Requeue::Stable
                }
                SubmitOutcome::Created { .. } | SubmitOutcome::Adopted { .. } => {
                    seen = Some((pass.target.batch_name(*attempt), BatchState::Pending));
                    Requeue::Active
                }
            },
        };
        match seen {
            Some((name, state)) if next == Requeue::Active && Batch::lists(&state) => {
                Wait::watch(Watch::state::<Batch>(&name, &state))
            }
            seen => Wait::poll_unwatching::<Batch>(next.after(config), seen.as_ref().map(|s| s.0.as_str())),
        }
    }

    fn deletion_policy(&self) -> DeletionPolicy {
        self.spec.deletion_policy
    }

    /// The deletion plan says whether its action leaves nothing (asked only once it succeeded).
    fn released(&self, pass: &Pass<'_, Self>) -> bool {
        pass.plan.details.releases
    }

    fn cleaned_up(&self, policy: DeletionPolicy) -> Option<Transition> {
        let note = match policy {
            DeletionPolicy::Delete => "all Dataproc batches of this object are deleted".to_string(),
            DeletionPolicy::Orphan => format!(
                "deletionPolicy Orphan: Dataproc batches left in place ({})",
                self.status
                    .as_ref()
                    .and_then(|s| s.batch_name.clone())
                    .unwrap_or_else(|| "none created".into())
            ),
        };
        Some(Transition::normal("Deleted", note))
    }

    fn transitions(old: &PreprocessBatchStatus, new: &PreprocessBatchStatus) -> Vec<Transition> {
        events::transitions(old, new)
    }

    fn waiting(st: &PreprocessBatchStatus) -> bool {
        st.phase == PreprocessBatchPhase::Waiting
    }

    fn stalled(
        &self,
        old: &PreprocessBatchStatus,
        reason: &'static str,
        message: &str,
        retry: bool,
        now: DateTime<Utc>,
    ) -> PreprocessBatchStatus {
        let waits = crate::reconcile::waits::stall_waits(reason, retry);
        old.stalled(
            self.metadata.generation,
            reason,
            message,
            waits,
            status::k8s_time(now),
        )
    }
}

/// What the batch asks of the namespace's policy.
fn request(obj: &PreprocessBatch, t: &Target) -> tenancy::Request {
    let project = t.parent.split('/').nth(1).unwrap_or_default();
    tenancy::Request {
        orphan: tenancy::request::orphans(obj.spec.deletion_policy),
        ..policy::batch(project, &obj.spec.region, &obj.spec.batch)
    }
}
