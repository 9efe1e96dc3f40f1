//! Kubernetes Events (`events.k8s.io/v1`) with series aggregation and a cache that stays small.
//!
//! An event that repeats within [`SERIES_WINDOW`] (same object, type, reason and note) becomes a
//! growing `series.count` on the Event already published instead of a new object, as
//! `kube::runtime::events::Recorder` does. That recorder, though, keeps two full copies of every
//! Event it published in the last six minutes (its key and the Event, ≈ 1.4 KiB inline each) and
//! scans them all on every publish: at 2,000 objects its table was 35 of the operator's 58 MiB
//! of peak heap (heaptrack, docs/benchmarks.md), and it grows with the number of objects. Here
//! an entry is a 64-bit hash of what makes two events the same, the Event's name and two
//! instants (under 100 bytes), and expired entries are dropped at most every half window.

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash, Hasher},
    sync::Mutex,
    time::Duration,
};
// tokio's clock: the OS's monotonic clock in a cluster, the paused one under `local`.
use tokio::time::Instant;

use k8s_openapi::{
    api::{
        core::v1::ObjectReference,
        events::v1::{Event, EventSeries},
    },
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};

use super::clock::{Clock, SystemClock};
use std::sync::Arc;

/// How long a published event can still grow a series (kube-runtime's recorder uses the same).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// An event published within the window.
struct Recent {
    name: String,
    count: i32,
    last: Instant,
}

/// Publishes Events for one controller process.
pub struct EventRecorder {
    client: kube::Client,
    controller: String,
    instance: String,
    recent: Mutex<Recents>,
    /// Where `eventTime` and a series' `lastObservedTime` come from: the controllers' clock, so
    /// Events and status times are on one timeline (under `local`, the emulated one).
    clock: Arc<dyn Clock>,
}

#[derive(Default)]
struct Recents {
    by_key: HashMap<u64, Recent>,
    pruned: Option<Instant>,
}

impl Recents {
    /// Drops entries past the window, at most every half window (each pass walks all entries).
    fn prune(&mut self, now: Instant) {
        if self
            .pruned
            .is_some_and(|t| now.duration_since(t) < SERIES_WINDOW / 2)
        {
            return;
        }
        self.by_key
            .retain(|_, r| now.duration_since(r.last) < SERIES_WINDOW);
        self.by_key.shrink_to_fit();
        self.pruned = Some(now);
    }
}

impl EventRecorder {
    /// `controller` is `reportingController` (and `reportingInstance` when `instance` is None).
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Self {
        Self {
            client,
            controller: controller.to_owned(),
            instance: instance.unwrap_or_else(|| controller.to_owned()),
            recent: Mutex::default(),
            clock: Arc::new(SystemClock),
        }
    }

    /// Stamps Events with `clock` instead of the wall clock.
    pub fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    /// Now on the recorder's clock, as an API timestamp.
    fn now(&self) -> Timestamp {
        let t = self.clock.now();
        Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    /// Events published in the window (for tests and benchmarks).
    pub fn cached(&self) -> usize {
        self.lock().by_key.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recents> {
        self.recent.lock().expect("event recorder cache poisoned")
    }

    /// Publishes an event about `regarding`: a new Event, or the next count of the series of the
    /// same event published within the window.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let key = event_key(regarding, type_, reason, note);
        let now = Instant::now();
        let repeat = {
            let mut recents = self.lock();
            recents.prune(now);
            recents
                .by_key
                .get(&key)
                .filter(|r| now.duration_since(r.last) < SERIES_WINDOW)
                .map(|r| (r.name.clone(), r.count + 1))
        };
        // Events live in their object's namespace (cluster-scoped objects: `default`).
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let published = match repeat {
            Some((name, count)) => match self.grow_series(namespace, &name, count).await {
                Ok(()) => Some((name, count)),
                // The Event expired or was deleted: publish it anew.
                Err(kube::Error::Api(s)) if s.is_not_found() => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        let (name, count) = match published {
            Some(p) => p,
            None => {
                let event = self.new_event(regarding, namespace, type_, reason, note);
                let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
                let created = api.create(&PostParams::default(), &event).await?;
                (created.metadata.name.unwrap_or_default(), 1)
            }
        };
        self.lock().by_key.insert(
            key,
            Recent {
                name,
                count,
                last: Instant::now(),
            },
        );
        Ok(())
    }

    /// Publishes an Event at most once per `key` on `regarding`, across restarts and leaders
    /// (e.g. a budget threshold of one period): its name derives from the key and the object's
    /// UID, and an Event of that name already there is this one. For what must be announced
    /// exactly once whatever is killed when: publish it before recording that it was.
    pub async fn publish_once(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
        key: &str,
    ) -> Result<(), kube::Error> {
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let mut event = self.new_event(regarding, namespace, type_, reason, note);
        let object = regarding.name.as_deref().unwrap_or(&self.controller);
        let uid = regarding.uid.as_deref().unwrap_or_default();
        event.metadata.name = Some(tpu_operator_api::naming::once_event_name(
            object,
            &format!("{uid}/{key}"),
        ));
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn grow_series(&self, namespace: &str, name: &str, count: i32) -> Result<(), kube::Error> {
        let series = EventSeries {
            count,
            last_observed_time: MicroTime(self.now()),
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let patch = serde_json::json!({ "series": series });
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
    }

    fn new_event(
        &self,
        regarding: &ObjectReference,
        namespace: &str,
        type_: EventType,
        reason: &str,
        note: &str,
    ) -> Event {
        let now = self.now();
        let object = regarding.name.as_deref().unwrap_or(&self.controller);
        Event {
            metadata: ObjectMeta {
                // Unique per object and instant, like kubectl's and client-go's event names: the
                // wall clock's instant (a test's manual clock can publish twice at one instant).
                name: Some(format!("{object}.{:x}", Timestamp::now().as_nanosecond())),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            action: Some(reason.to_owned()),
            reason: Some(reason.to_owned()),
            note: Some(note.to_owned()),
            type_: Some(type_.as_str().to_owned()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        }
    }
}

/// What makes two events the same: the object (its uid, else its coordinates), type, reason
/// and note.
fn event_key(regarding: &ObjectReference, type_: EventType, reason: &str, note: &str) -> u64 {
    let mut h = DefaultHasher::new();
    match &regarding.uid {
        Some(uid) => uid.hash(&mut h),
        None => (
            &regarding.api_version,
            &regarding.kind,
            &regarding.namespace,
            &regarding.name,
        )
            .hash(&mut h),
    }
    (type_, reason, note).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("tpu-operator.dev/v1beta1".into()),
            kind: Some("TpuSlice".into()),
            namespace: Some("ml".into()),
            name: Some("s".into()),
            uid: Some(uid.into()),
            ..ObjectReference::default()
        }
    }

    #[test]
    fn same_event_same_key_and_any_difference_another() {
        let k = event_key(&reference("u1"), EventType::Normal, "Ready", "node READY");
        assert_eq!(
            k,
            event_key(&reference("u1"), EventType::Normal, "Ready", "node READY")
        );
        for other in [
            event_key(&reference("u2"), EventType::Normal, "Ready", "node READY"),
            event_key(&reference("u1"), EventType::Warning, "Ready", "node READY"),
            event_key(&reference("u1"), EventType::Normal, "Creating", "node READY"),
            event_key(&reference("u1"), EventType::Normal, "Ready", "node READY again"),
        ] {
            assert_ne!(k, other);
        }
    }

    #[test]
    fn prune_drops_entries_past_the_window_at_most_every_half_window() {
        let start = Instant::now();
        let mut recents = Recents::default();
        let entry = |last| Recent {
            name: "e".into(),
            count: 1,
            last,
        };
        let window = SERIES_WINDOW;
        recents.by_key.insert(1, entry(start));
        recents.by_key.insert(2, entry(start + window));
        recents.prune(start + window);
        assert_eq!(recents.by_key.keys().copied().collect::<Vec<_>>(), vec![2]);
        // Within half a window of the last pass nothing is walked, even what expired.
        recents.by_key.insert(3, entry(start));
        recents.prune(start + window + window / 4);
        assert_eq!(recents.by_key.len(), 2);
        recents.prune(start + window + window / 2);
        assert_eq!(recents.by_key.keys().copied().collect::<Vec<_>>(), vec![2]);
    }
}
