//! What the pass's unit tests drive it with: a kind with no cloud behind it, whose hooks note
//! each call in order; reports kept in memory; and a [`Context`] whose API server answers every
//! read with nothing (so no test here reaches Kubernetes or Google Cloud).

use std::{
    cell::RefCell,
    convert::Infallible,
    sync::{Arc, Mutex, OnceLock},
};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use k8s_openapi::{api::core::v1::ObjectReference, apimachinery::pkg::apis::meta::v1::Condition};
use kube::{CustomResource, api::ObjectMeta, client::Body};
use serde::{Deserialize, Serialize};
use tpu_operator_api::{
    DeletionPolicy,
    conditions::{condition, set_condition, types},
    tpu_policy::TpuPolicy,
};
use tpu_operator_gcp::{ErrorKind, Gcp, GcpConfig, GcpError, Service, metrics::GcpMetrics};

use crate::{
    governance::tenancy::{self, Policies, WithoutPolicy},
    reconcile::{
        context::Context,
        handles::{Io, Settings},
        kind::{Acted, Admission, Kind, OwnedHolder, Pass, Stop, WriteAhead},
        plan::{Plan, Verdict},
        report::{Reports, Transition},
        wait::Wait,
    },
    runtime::{
        clock::{Clock, k8s_time},
        config::ControllerConfig,
        error::{ReconcileError, Result},
        events::EventType,
        requeue::Requeue,
    },
};

/// What the fake's hooks do on a pass.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize)]
#[kube(
    group = "test.tpu-operator.dev",
    version = "v1",
    kind = "Fake",
    namespaced,
    status = "FakeStatus",
    schema = "disabled"
)]
pub struct FakeSpec {
    /// `target` says nothing can be done until the spec changes.
    #[serde(default)]
    pub stop: bool,
    /// `first_look` asks the policy about the spec alone.
    #[serde(default)]
    pub first_look: bool,
    /// `admission` asks for a counted admission (the namespace's lock and usage).
    #[serde(default)]
    pub counted: bool,
    /// `act` reports a refused call.
    #[serde(default)]
    pub fail_act: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct FakeStatus {
    #[serde(default)]
    pub phase: String,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(flatten)]
    pub newer_fields: tpu_operator_api::NewerFields,
}

impl tpu_operator_api::KeepsNewerFields for FakeStatus {
    fn newer_fields(&self) -> &tpu_operator_api::NewerFields {
        &self.newer_fields
    }
    fn newer_fields_mut(&mut self) -> &mut tpu_operator_api::NewerFields {
        &mut self.newer_fields
    }
}

thread_local! {
    /// The hooks called, in order, with the writes and Events between them (a current-thread
    /// test runtime runs every hook on the test's thread).
    static STEPS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

fn step(what: impl Into<String>) {
    STEPS.with(|s| s.borrow_mut().push(what.into()));
}

/// The steps noted since the last call.
pub fn steps() -> Vec<String> {
    STEPS.with(|s| std::mem::take(&mut *s.borrow_mut()))
}

/// A `Fake` named `name` in namespace `team`, at version 1.
pub fn fake(name: &str, spec: FakeSpec) -> Fake {
    Fake {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("team".into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some("1".into()),
            generation: Some(1),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

/// `obj` as the API server shows it once deleted with a finalizer on it.
pub fn deleting(mut obj: Fake) -> Fake {
    let at = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
    obj.metadata.deletion_timestamp = Some(k8s_time(at));
    obj
}

impl Fake {
    /// A previous deletion pass said `Deleting`: its cloud object is gone now.
    fn released_before(&self) -> bool {
        self.status.as_ref().is_some_and(|s| s.phase == "Deleting")
    }
}

impl Kind for Fake {
    const KIND: &'static str = "Fake";
    const FIELD_MANAGER: &'static str = "fake.test.tpu-operator.dev";
    const SETTLES: bool = false;

    type Status = FakeStatus;
    type Target = ();
    type Observed = ();
    type Action = ();
    type Phase = ();
    type Details = ();
    type Done = ();

    fn status(&self) -> Option<&FakeStatus> {
        self.status.as_ref()
    }

    fn conditions(status: &FakeStatus) -> &[Condition] {
        &status.conditions
    }

    fn target(&self, _settings: Settings<'_>) -> Result<Result<(), Stop>> {
        step("target");
        Ok(if self.spec.stop {
            Err(Stop {
                reason: "SpecInvalid",
                message: "spec.stop is set".into(),
            })
        } else {
            Ok(())
        })
    }

    fn first_look(&self, _settings: Settings<'_>, _t: &()) -> Vec<tenancy::Request> {
        step("first_look");
        let asks = tenancy::Request {
            what: "Fake".into(),
            ..tenancy::Request::default()
        };
        if self.spec.first_look {
            vec![asks]
        } else {
            Vec::new()
        }
    }

    async fn observe(&self, _io: &Io<'_>, _t: &()) -> Result<()> {
        step("observe");
        Ok(())
    }

    fn plan(&self, _now: DateTime<Utc>, _t: &(), _observed: &()) -> Plan<(), ()> {
        step("plan");
        Plan::new((), Verdict::keep((), Requeue::Stable), ())
    }

    fn admission(&self, _settings: Settings<'_>, _t: &(), _plan: &Plan<(), ()>) -> Option<Admission> {
        step("admission");
        self.spec.counted.then(|| Admission {
            checked: Vec::new(),
            counted: vec![tenancy::Request {
                what: "Fake".into(),
                per_hour_usd: 1.0,
                ..tenancy::Request::default()
            }],
            holder: OwnedHolder {
                uid: self.metadata.uid.clone().unwrap_or_default(),
                what: "Fake".into(),
                holds: true,
            },
        })
    }

    async fn act(
        &self,
        _io: &Io<'_>,
        _t: &(),
        _observed: &(),
        _plan: &Plan<(), ()>,
        _ahead: &mut dyn WriteAhead<FakeStatus>,
    ) -> Result<Acted<()>> {
        step("act");
        let mut acted = Acted::done(());
        if !self.deleting() {
            acted.events.push(Transition::normal("Acted", "the fake acted"));
        } else if !self.released_before() {
            acted
                .events
                .push(Transition::normal("Cancelling", "the fake's cloud object"));
        }
        if self.spec.fail_act {
            let refused = GcpError::new(
                ErrorKind::PermissionDenied,
                Service::Tpu,
                "nodes.create",
                "n",
                "no",
            );
            acted.failed = Some(ReconcileError::gcp("create the fake")(refused));
        }
        Ok(acted)
    }

    fn report(&self, now: DateTime<Utc>, pass: &Pass<'_, Self>) -> FakeStatus {
        step("report");
        let mut new = pass.old.clone();
        new.phase = if self.deleting() { "Deleting" } else { "Acted" }.into();
        let ready = condition(types::READY, true, "Acted", "acted", None, k8s_time(now));
        set_condition(&mut new.conditions, ready);
        new
    }

    fn wait(&self, config: &ControllerConfig, _pass: &Pass<'_, Self>, _new: &FakeStatus) -> Wait {
        step("wait");
        Wait::Poll {
            after: config.poll_stable,
            unwatch: None,
        }
    }

    fn deletion_policy(&self) -> DeletionPolicy {
        DeletionPolicy::Delete
    }

    /// Deletes through the hooks: pending (status `Deleting`) on the first pass, released on
    /// the next.
    fn released(&self, _pass: &Pass<'_, Self>) -> bool {
        step("released");
        self.released_before()
    }

    fn cleaned_up(&self, _policy: DeletionPolicy) -> Option<Transition> {
        Some(Transition::normal("CleanedUp", "nothing of the fake's is left"))
    }

    fn transitions(old: &FakeStatus, new: &FakeStatus) -> Vec<Transition> {
        if old.phase == new.phase {
            return Vec::new();
        }
        vec![Transition::normal(
            "Phase",
            format!("{} -> {}", old.phase, new.phase),
        )]
    }

    fn waiting(_status: &FakeStatus) -> bool {
        false
    }

    fn stalled(
        &self,
        old: &FakeStatus,
        reason: &'static str,
        message: &str,
        _retry: bool,
        now: DateTime<Utc>,
    ) -> FakeStatus {
        let mut new = old.clone();
        new.phase = "Stalled".into();
        let stalled = condition(types::STALLED, true, reason, message, None, k8s_time(now));
        set_condition(&mut new.conditions, stalled);
        new
    }
}

/// One status write the pass made.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    pub status: FakeStatus,
    /// The version the write was conditional on.
    pub base: Option<String>,
    /// Whether the namespace's admission lock was held while it was written.
    pub locked: bool,
}

/// [`Reports`] in memory: status writes and Events, in order.
#[derive(Default)]
pub struct Memory {
    pub writes: Mutex<Vec<Written>>,
    pub events: Mutex<Vec<String>>,
    /// The context's tenancy, to see whether the namespace's lock is held during a write.
    tenancy: OnceLock<Arc<tenancy::Tenancy>>,
}

impl Memory {
    pub fn writes(&self) -> Vec<Written> {
        self.writes.lock().unwrap().clone()
    }

    pub fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }
}

#[async_trait]
impl Reports for Memory {
    async fn apply_status(
        &self,
        _path: &str,
        _name: &str,
        _field_manager: &str,
        patch: serde_json::Value,
    ) -> Result<Option<String>> {
        step("write");
        let locked = self
            .tenancy
            .get()
            .is_some_and(|t| matches!(t.try_enter("team"), Err(tenancy::Busy)));
        let mut writes = self.writes.lock().unwrap();
        writes.push(Written {
            status: serde_json::from_value(patch["status"].clone()).unwrap(),
            base: patch["metadata"]["resourceVersion"].as_str().map(str::to_owned),
            locked,
        });
        Ok(Some((writes.len() + 1).to_string()))
    }

    async fn publish(
        &self,
        _regarding: &ObjectReference,
        _type: EventType,
        reason: &str,
        _note: &str,
    ) -> Result<(), kube::Error> {
        step(format!("event {reason}"));
        self.events.lock().unwrap().push(reason.to_owned());
        Ok(())
    }

    fn set_clock(&mut self, _clock: Arc<dyn Clock>) {}
}

/// An API server with nothing in it: every list is empty, the one object read by name (the
/// orphan book's ConfigMap) is not found, and every write is refused (the pass writes only
/// through [`Reports`]).
fn empty_api_server() -> kube::Client {
    let service = tower::service_fn(|req: http::Request<Body>| async move {
        let (code, body) = match (req.method(), req.uri().path()) {
            (&http::Method::GET, path) if path.contains("/configmaps/") => (
                404,
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404, "message": "not found"}),
            ),
            (&http::Method::GET, _) => (
                200,
                serde_json::json!({"kind": "List", "apiVersion": "v1", "metadata":
                    {"resourceVersion": "1"}, "items": []}),
            ),
            _ => (
                405,
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "MethodNotAllowed", "code": 405, "message": "read-only"}),
            ),
        };
        let response = http::Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap();
        Ok::<_, Infallible>(response)
    });
    kube::Client::new(service, "default")
}

/// A context whose reports go to memory, with `policies` governing namespace `team`.
pub async fn context(policies: Vec<TpuPolicy>, without_policy: WithoutPolicy) -> (Context, Arc<Memory>) {
    // Nothing listens there: a call to Google Cloud fails (no test here makes one).
    let config = GcpConfig::emulator("http://127.0.0.1:9".parse().unwrap());
    let gcp = Gcp::connect(config, GcpMetrics::new()).await.unwrap();
    let memory = Arc::new(Memory::default());
    let ctx = Context::new(empty_api_server(), gcp, ControllerConfig::default())
        .with_policies(Policies::fixed(policies, without_policy))
        .with_reports(memory.clone());
    memory.tenancy.set(ctx.tenancy.clone()).ok();
    (ctx, memory)
}
