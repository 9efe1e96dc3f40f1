//! What a kind's hooks ([`Kind`](super::kind::Kind)) are handed instead of the whole
//! [`Context`]: each hook gets only the handles its step needs, so its signature says what it can
//! touch. The pure hooks (target, first look, claim, admission, orphaned, settles) get
//! [`Settings`] alone and can call nothing; the two that update what the process remembers but
//! call nothing (contention, forget) get [`Kept`] besides; only the hooks that read or change the
//! world (observe, act, clean, let go) get [`Io`]. The rest of the context (status writes and
//! Events, backoff, the settled cache, fair share, admissions) belongs to the pass alone.

use std::sync::Arc;

use tpu_operator_gcp::{Gcp, StorageApi};

use super::context::Context;
use crate::{
    governance::{
        pricing::PriceTable,
        tenancy::{self, Policies},
    },
    runtime::{
        capacity::Capacity,
        clock::Clock,
        cloud_watch::{CloudWatch, Listable, Owner},
        config::ControllerConfig,
        metrics::Metrics,
        shared::Shared,
    },
};

/// What the operator was told, read-only: its configuration and the cluster's tenancy policies
/// and prices. All a pure hook may depend on besides the object, so that the same object under
/// the same settings always gets the same answer: no client, no clock (a pure hook gets the time
/// from the pass, as [`Kind::plan`](super::kind::Kind::plan) does, or not at all), and of the
/// tenancy only what is read, not the admissions and usage that read the API server.
#[derive(Clone, Copy)]
pub struct Settings<'a> {
    pub config: &'a ControllerConfig,
    /// The namespaces' `TpuPolicy` rules, as last watched.
    pub policies: &'a Policies,
    /// List prices, for the cost a request or a holding is judged by.
    pub prices: &'a PriceTable,
}

impl Settings<'_> {
    /// The project an object's cloud resources live in: its own, else its namespace's default
    /// (tenancy policy), else the operator default.
    pub fn project_for(&self, namespace: &str, explicit: Option<&str>) -> Option<String> {
        explicit
            .map(str::to_owned)
            .or_else(|| {
                self.policies
                    .governing(namespace)
                    .default_project()
                    .map(str::to_owned)
            })
            .or_else(|| self.config.default_project.clone())
    }
}

/// What the process keeps in memory between passes, which a hook may update without calling out:
/// what the kinds share with each other and with their watches ([`Shared`]: watch caches, who
/// waits for what), the metrics, and wake-ups of objects that waited for this one. Given to the
/// hooks that must let go of or record such things (contention, forget) without giving them a
/// client; the cloud watch is reachable only to wake an owner.
#[derive(Clone, Copy)]
pub struct Kept<'a> {
    pub shared: &'a Shared,
    pub metrics: &'a Metrics,
    cloud_watch: &'a CloudWatch,
}

impl Kept<'_> {
    /// `owner` gets a pass now: what it waited for let go.
    pub fn wake(&self, owner: &Owner) {
        self.cloud_watch.wake_owner(owner);
    }
}

/// The calls a hook makes to the world, for the hooks that read or change it (observe, act,
/// clean, let go), with the [`Settings`] and [`Kept`] memory they also use. Besides the clients it
/// holds what stands in for or paces a call: the cloud watch's latest listing (read instead of a
/// `get`; its registration stays the pass's), the capacity memory consulted around every create,
/// and the clock, since when a call is made is one of its inputs.
#[derive(Clone, Copy)]
pub struct Io<'a> {
    pub settings: Settings<'a>,
    pub kept: Kept<'a>,
    /// The API server: owned children, Kueue Workloads.
    pub client: &'a kube::Client,
    pub gcp: &'a Gcp,
    /// Which places stocked out lately and how fast creates may go (see [`Capacity`]).
    pub capacity: &'a Capacity,
    pub clock: &'a dyn Clock,
    /// Private: a hook reads the listing; what is watched is the pass's to register.
    cloud_watch: &'a CloudWatch,
}

impl Io<'_> {
    /// What the cloud watch's latest listing saw of `name`, taken so that it stands in for one
    /// read only (see [`CloudWatch::take`]).
    pub fn take_listed<T: Listable>(&self, name: &str) -> Option<T> {
        self.cloud_watch.take(name)
    }

    /// `name` as listed, while the listing is recent and saw no change (see
    /// [`CloudWatch::unchanged`]).
    pub fn unchanged_listed<T: Listable>(&self, name: &str) -> Option<T> {
        self.cloud_watch.unchanged(name)
    }

    /// Cloud Storage as `namespace`'s Google identity: its `googleServiceAccount`, impersonated,
    /// or the operator's own identity when it has none.
    pub fn storage_for(&self, namespace: &str) -> Arc<dyn StorageApi> {
        let sa = tenancy::identity::service_account(self.settings.policies, namespace);
        self.gcp.storage_as(sa.as_deref())
    }
}

impl Context {
    /// The read-only view a pure hook gets.
    pub fn settings(&self) -> Settings<'_> {
        Settings {
            config: &self.config,
            policies: &self.tenancy.policies,
            prices: &self.tenancy.prices,
        }
    }

    /// The in-process memory a hook may update without calling out.
    pub fn kept(&self) -> Kept<'_> {
        Kept {
            shared: &self.shared,
            metrics: &self.metrics,
            cloud_watch: &self.cloud_watch,
        }
    }

    /// Everything a hook that calls out gets.
    pub fn io(&self) -> Io<'_> {
        Io {
            settings: self.settings(),
            kept: self.kept(),
            client: &self.client,
            gcp: &self.gcp,
            capacity: &self.capacity,
            clock: self.clock.as_ref(),
            cloud_watch: &self.cloud_watch,
        }
    }
}
