//! What a kind supplies to the reconcile pass: only what differs between kinds. The pass
//! ([`super::pass`], [`super::deletion`]) owns the sequence and everything the kinds share.

use std::{fmt::Debug, future::Future};

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{
    Resource,
    core::NamespaceResourceScope,
    runtime::{Controller, watcher},
};
use serde::{Serialize, de::DeserializeOwned};
use tpu_operator_api::{
    DeletionPolicy, KeepsNewerFields,
    common::CostEstimate,
    conditions::{find_condition, types},
};

use super::{
    handles::{Io, Kept, Settings},
    report::Transition,
    wait::Wait,
};
use crate::{
    governance::tenancy::{self, Denial, usage::Holding},
    runtime::{
        config::ControllerConfig,
        error::{ReconcileError, Result},
        watched::Cached,
    },
};

/// One custom resource kind: its names, its reads, its pure plan, its one action, its pure
/// status and what it waits on. Nothing here calls tenancy, the cloud watch or the status writer:
/// the pass does, with what these return. Each hook gets only the handles its step needs
/// ([`super::handles`]): [`Settings`] for the pure ones, [`Kept`] besides for those that update
/// what the process remembers, [`Io`] for those that call out.
pub trait Kind:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The kind's name in metrics and logs.
    const KIND: &'static str;
    /// The only writer of the kind's status.
    const FIELD_MANAGER: &'static str;
    /// Whether a pass that finds the object exactly as the last one left it may be skipped (see
    /// [`crate::runtime::settled`]): only for kinds whose reconcile depends on nothing but the
    /// object and the cloud.
    const SETTLES: bool;

    type Status: Clone + Default + PartialEq + Serialize + KeepsNewerFields + Send + Sync;
    /// What the object is called in the cloud, derived once a pass from the object alone.
    type Target: Send + Sync;
    /// What a pass read from the cloud (and from Kubernetes, for owned children).
    type Observed: Send + Sync;
    /// The kind's one mutating call of a pass (its `Nothing` makes none): the plan's action.
    type Action: Send + Sync;
    /// The kind's phase, as the plan's verdict says it.
    type Phase: Send + Sync;
    /// What only this kind's plan reports besides the verdict (`()` when nothing).
    type Details: Send + Sync;
    /// What the action did (names the cloud assigned, operations started).
    type Done: Send + Sync;

    fn status(&self) -> Option<&Self::Status>;

    /// Whether this object's pass may be settled ([`Kind::SETTLES`] kinds only): `false` while
    /// something outside the object and the cloud decides its next pass (a Kueue Workload, whose
    /// admission leaves the object's own `resourceVersion` unchanged).
    fn settles(&self, _settings: Settings<'_>) -> bool {
        true
    }

    /// The kstatus conditions of `status`.
    fn conditions(status: &Self::Status) -> &[Condition];

    /// The estimated spend `status` shows, for the per-namespace spend metric.
    fn spend(_status: &Self::Status) -> Option<&CostEstimate> {
        None
    }

    /// Further watches that wake an object (its owned children); none by default.
    fn watches(controller: Controller<Cached<Self>>, _watch: &Watches<'_>) -> Controller<Cached<Self>> {
        controller
    }

    // ---- the apply pass ----

    /// The object's cloud names, or why nothing can be done until the spec changes.
    fn target(&self, settings: Settings<'_>) -> Result<Result<Self::Target, Stop>>;

    /// Another object of the operator's holds what this one needs (a pipeline's model directory
    /// another live pipeline writes): the pass stalls it with the returned reason and message,
    /// before any cloud read, and looks again at the stable interval. None by default. `kept`:
    /// who waits for whom is remembered, and a holder that let go wakes its waiters.
    fn contention(&self, _settings: Settings<'_>, _kept: Kept<'_>, _t: &Self::Target) -> Option<Stop> {
        None
    }

    /// The policy requests judged on the spec alone before any cloud read; none: no first look
    /// this pass (e.g. the object already created something, which the pass must keep watching).
    fn first_look(&self, _settings: Settings<'_>, _t: &Self::Target) -> Vec<tenancy::Request> {
        Vec::new()
    }

    /// The cloud (and owned children) as they are.
    fn observe(&self, io: &Io<'_>, t: &Self::Target) -> impl Future<Output = Result<Self::Observed>> + Send;

    /// What the observed state asks of the policy before the plan runs on it (a TpuSlice taking
    /// over an existing node); nothing by default.
    fn claim(&self, _settings: Settings<'_>, _t: &Self::Target, _observed: &Self::Observed) -> Claim {
        Claim::Nothing
    }

    /// The pure plan.
    fn plan(&self, now: DateTime<Utc>, t: &Self::Target, observed: &Self::Observed) -> PlanOf<Self>;

    /// What the plan would create, for the policy to admit first; `None` when it creates nothing.
    fn admission(
        &self,
        _settings: Settings<'_>,
        _t: &Self::Target,
        _plan: &PlanOf<Self>,
    ) -> Option<Admission> {
        None
    }

    /// Carries out the plan's action, changing nothing it is given: what it learned (names the
    /// cloud assigned, an operation started, a call refused) goes into `Done`, for `report`. A
    /// write-ahead status (a marker persisted before a create whose reply may be lost) goes
    /// through `ahead`.
    fn act(
        &self,
        io: &Io<'_>,
        t: &Self::Target,
        observed: &Self::Observed,
        plan: &PlanOf<Self>,
        ahead: &mut dyn WriteAhead<Self::Status>,
    ) -> impl Future<Output = Result<Acted<Self::Done>>> + Send;

    /// The status this pass writes (pure).
    fn report(&self, now: DateTime<Utc>, pass: &Pass<'_, Self>) -> Self::Status;

    /// What the object waits on after this pass (pure).
    fn wait(&self, config: &ControllerConfig, pass: &Pass<'_, Self>, new: &Self::Status) -> Wait;

    // ---- the deletion pass ----

    /// The deletion policy the spec asks for (the pass applies what the tenancy policy allows).
    fn deletion_policy(&self) -> DeletionPolicy;

    /// What an allowed `Orphan` deletion leaves holding quota and budget; nothing by default.
    fn orphaned(&self, _settings: Settings<'_>, _t: &Self::Target) -> Option<Holding> {
        None
    }

    /// Whether the object is being deleted. A deletion (policy `Delete`) runs through the apply
    /// hooks ([`super::deletion`]): `observe`, `plan`, `act`, `report` and `wait` ask this and
    /// plan the release of what the object holds; [`Kind::released`] says when nothing is left.
    fn deleting(&self) -> bool {
        self.meta().deletion_timestamp.is_some()
    }

    /// A deletion pass: whether nothing of the object's is left in the cloud once this pass's
    /// action is done, so that its finalizer may go (pure). Never asked of an apply pass.
    fn released(&self, pass: &Pass<'_, Self>) -> bool;

    /// What the object holds in Kubernetes that goes with it once its cloud resources are gone
    /// or orphaned, before its finalizer goes: its Kueue Workload, whose quota stays reserved
    /// until then (and which its own finalizer would otherwise keep forever). Nothing by default.
    fn let_go(&self, _io: &Io<'_>) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }

    /// The Event published once the finalizer goes (every cloud object gone, or orphaned).
    fn cleaned_up(&self, _policy: DeletionPolicy) -> Option<Transition> {
        None
    }

    /// The object is being deleted (with or without our finalizer): drops what the process
    /// remembers about it besides the settled cache and backoff.
    fn forget(&self, _settings: Settings<'_>, _kept: Kept<'_>) {}

    // ---- how status says it ----

    /// The Events a status change publishes, after its write (besides a wait's, which the pass
    /// publishes from [`Kind::waiting`]).
    fn transitions(old: &Self::Status, new: &Self::Status) -> Vec<Transition>;

    /// Whether `status` waits for capacity, a quota or the namespace's policy (the kind's
    /// `Waiting` phase): the pass publishes a Warning when a wait starts and a Normal
    /// `WaitEnded` when it ends ([`super::waits`]).
    fn waiting(status: &Self::Status) -> bool;

    /// `old` as a stall says it: `Stalled` for `reason` with `message` at `now`, nothing else
    /// changed but what the kind's phase must show (`retry`: the refusal is looked at again, e.g.
    /// a quota that may free up).
    fn stalled(
        &self,
        old: &Self::Status,
        reason: &'static str,
        message: &str,
        retry: bool,
        now: DateTime<Utc>,
    ) -> Self::Status;

    /// `old` after a pass failed on a call that waits on something outside the operator: Google
    /// refused it (`PermissionDenied`), or Kueue did not answer (`KueueUnavailable`): `Stalled` with
    /// `reason` and `message`. By default as [`Kind::stalled`] says a refusal looked at again; a
    /// kind whose phase says what runs keeps it.
    fn refused(
        &self,
        old: &Self::Status,
        reason: &'static str,
        message: &str,
        now: DateTime<Utc>,
    ) -> Self::Status {
        self.stalled(old, reason, message, true, now)
    }

    /// Whether `status` already says `Stalled=True` with `reason`.
    fn stalled_for(status: &Self::Status, reason: &str) -> bool {
        find_condition(Self::conditions(status), types::STALLED)
            .is_some_and(|c| c.status == "True" && c.reason == reason)
    }
}

/// Every kind's plan: one shape ([`super::plan::Plan`]) over the kind's action, phase and
/// details.
pub type PlanOf<K> = super::plan::Plan<<K as Kind>::Action, <K as Kind>::Phase, <K as Kind>::Details>;

/// Persists a write-ahead status inside an action, before a call whose reply may be lost (a
/// create Google names, not we): the pass provides it ([`super::status::Ahead`]) so that the
/// pass's final write is conditional on the version this one wrote.
pub trait WriteAhead<S>: Send {
    /// Persists `marked` (the stored status with the marker set) now.
    fn write<'a>(&'a mut self, marked: &'a S) -> futures::future::BoxFuture<'a, Result<()>>;
}

/// What one apply pass knows by the time it reports: for the pure [`Kind::report`] and
/// [`Kind::wait`].
pub struct Pass<'a, K: Kind> {
    pub obj: &'a K,
    pub old: &'a K::Status,
    pub target: &'a K::Target,
    pub observed: &'a K::Observed,
    pub plan: &'a PlanOf<K>,
    pub done: &'a K::Done,
}

/// Nothing can be done until the spec (or the operator's configuration) changes: the pass
/// stalls the object with `reason` and waits for a change.
#[derive(Clone, Debug)]
pub struct Stop {
    pub reason: &'static str,
    pub message: String,
}

/// What a create needs from the namespace's policy.
#[derive(Clone, Debug, Default)]
pub struct Admission {
    /// Judged on the spec alone (project, location, accelerator, identity, ...).
    pub checked: Vec<tenancy::Request>,
    /// Judged with the namespace's usage (chip quota, budget), under the namespace's admission
    /// lock; empty: no usage is read.
    pub counted: Vec<tenancy::Request>,
    /// The object, as usage names it.
    pub holder: OwnedHolder,
}

/// [`tenancy::Holder`], owned.
#[derive(Clone, Debug, Default)]
pub struct OwnedHolder {
    pub uid: String,
    pub what: String,
    pub holds: bool,
}

impl OwnedHolder {
    pub fn borrowed(&self) -> tenancy::Holder<'_> {
        tenancy::Holder {
            uid: &self.uid,
            what: &self.what,
            holds: self.holds,
        }
    }
}

/// What the observed state asks of the policy before the plan (see [`Kind::claim`]).
#[derive(Debug)]
pub enum Claim {
    Nothing,
    /// Refused without a usage read (e.g. someone else's node).
    Refused(Denial),
    /// Admitted like a create, with usage, under the namespace's lock.
    Admit(Admission),
}

/// What [`Kind::act`] did, and what the pass does with it besides the status.
pub struct Acted<D> {
    pub done: D,
    /// Events besides the status transitions, published after the write.
    pub events: Vec<Transition>,
    /// A refused call, reported in the status being written: the pass returns it after the
    /// write, for the error policy's slow retry.
    pub failed: Option<ReconcileError>,
}

impl<D> Acted<D> {
    pub fn done(done: D) -> Self {
        Self {
            done,
            events: Vec::new(),
            failed: None,
        }
    }
}

/// Where the extra watches of [`Kind::watches`] read from.
pub struct Watches<'a> {
    pub client: &'a kube::Client,
    pub namespace: Option<&'a str>,
    /// The Kueue integration is on: Workloads exist and wake their owners.
    pub kueue: bool,
    /// What the kind's passes share with its watches (what a gated object awaits).
    pub shared: &'a crate::runtime::shared::Shared,
}

impl Watches<'_> {
    /// The metadata of the `K`s the operator watches (see [`crate::runtime::watched::metadata`]).
    pub fn metadata<K>(
        &self,
    ) -> impl futures::Stream<Item = Result<kube::core::PartialObjectMeta<K>, watcher::Error>> + Send + 'static
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
        K: Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        crate::runtime::watched::metadata::<K>(self.client, self.namespace)
    }
}
