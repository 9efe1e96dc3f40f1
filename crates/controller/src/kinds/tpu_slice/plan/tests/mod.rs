//! Table tests of the pure planning functions: every TPU node state and queued-resource state
//! ([`states`]), the recreation window, creates that fail, drift, limits and deletion
//! ([`transitions`]). Fixtures live here.

use chrono::{DateTime, Utc};
use kube::api::ObjectMeta;
use serde_json::json;
use tpu_operator_api::{
    conditions::{Progress, reasons},
    naming::ObjectIdentity,
    tpu_slice::{TpuSlice, TpuSlicePhase as P, TpuSliceSpec, TpuSliceStatus},
};
use tpu_operator_gcp::{
    ErrorKind, GcpError, Service,
    tpu_v2::model::{Node, QueuedResource, node::Health as H, node::State as S},
};

use super::*;

mod kueue;
mod maintenance;
mod slices;
mod states;
mod transitions;
use crate::kinds::tpu_slice::{observe::Names, spec};

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-02T10:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

struct Case {
    slice: TpuSlice,
    observed: Observed,
    ready_since: Option<DateTime<Utc>>,
    last_active: Option<DateTime<Utc>>,
    /// The previous incarnation was left by a move along a capacity plan.
    spec_moved: bool,
}

impl Case {
    fn new(capacity: serde_json::Value) -> Self {
        let spec: TpuSliceSpec = serde_json::from_value(json!({
            "zone": "us-east5-b", "acceleratorType": "v6e-8", "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": capacity, "preemption": {"maxRecreations": 2}
        }))
        .unwrap();
        let slice = TpuSlice {
            metadata: ObjectMeta {
                name: Some("s".into()),
                namespace: Some("default".into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            },
            spec,
            status: None,
        };
        Self {
            slice,
            observed: Observed::default(),
            ready_since: None,
            last_active: None,
            spec_moved: false,
        }
    }

    fn spot() -> Self {
        Self::new(json!({"spot": {}}))
    }

    fn queued() -> Self {
        Self::new(json!({"queued": {"tier": "Spot", "validUntilDuration": "1h"}}))
    }

    fn recreations(mut self, n: i32) -> Self {
        self.slice.status = Some(TpuSliceStatus {
            recreations: n,
            ..Default::default()
        });
        self
    }

    fn identity() -> ObjectIdentity {
        ObjectIdentity::new("default", "s", "uid-1")
    }

    fn names(&self) -> Names {
        Names::new(
            &self.slice,
            &self.slice.spec,
            &self.slice.spec,
            &Self::identity(),
            "p".into(),
        )
    }

    fn desired(&self) -> spec::Desired {
        spec::desired(
            &self.slice.spec,
            &Self::identity(),
            "c",
            None,
            &Default::default(),
        )
    }

    /// A node at the current id carrying exactly the desired labels / metadata / tags.
    fn node(&self, state: S, health: H) -> Node {
        let d = self.desired();
        Node::new()
            .set_name(self.names().current.node)
            .set_state(state)
            .set_health(health)
            .set_labels(d.labels)
            .set_metadata(d.metadata)
            .set_tags(d.tags)
    }

    fn with_node(mut self, state: S, health: H) -> Self {
        self.observed.node = Some(self.node(state, health));
        self
    }

    fn plan(&self) -> Plan {
        let names = self.names();
        let desired = self.desired();
        let checked = crate::kinds::tpu_slice::backend::check(
            &self.slice.spec,
            &desired,
            &Self::identity(),
            &names.create_at(),
        );
        plan(&Input {
            spec: &self.slice.spec,
            names: &names,
            observed: &self.observed,
            desired: &desired,
            shape: checked.as_ref().map(|c| &c.shape).map_err(String::as_str),
            recreations: self.slice.status.as_ref().map_or(0, |s| s.recreations),
            suspended: self
                .slice
                .status
                .as_ref()
                .is_some_and(|s| s.phase == tpu_operator_api::tpu_slice::TpuSlicePhase::Suspended),
            queue: self.observed.queue.as_ref(),
            ran_node: self.slice.status.as_ref().is_some_and(|s| s.node_name.is_some()),
            queue_stopped: self
                .slice
                .status
                .as_ref()
                .and_then(|s| s.kueue.as_ref())
                .is_some_and(|k| k.stopped),
            ready_since: self.ready_since,
            last_active: self.last_active,
            run_over: false,
            spec_moved: self.spec_moved,
            slice_restarts: self.slice.status.as_ref().map_or(&[], |s| &s.slice_restarts),
            replacing: self.slice.status.as_ref().map_or(&[], |s| &s.replacing_slices),
            now: now(),
        })
    }
}

fn qr(name: &str, state: &str, initiator: &str) -> QueuedResource {
    serde_json::from_value(json!({
        "name": name,
        "createTime": "2026-03-02T09:30:00Z",
        "state": {"state": state, "stateInitiator": initiator}
    }))
    .unwrap()
}

fn summary(p: &Plan) -> (Action, Progress, &'static str, P) {
    (
        p.action.clone(),
        p.verdict.said().progress,
        p.verdict.said().reason,
        p.verdict.phase,
    )
}
