//! What the stockout memory holds, as a reader outside the process may see it: the leader
//! publishes it ([`super::publish`]) and `tpu-operator capacity` shows it.
//!
//! Pure: built from the memory and `now`, serialized as JSON into one ConfigMap key. The JSON is
//! an object with named sections (`places` today), so a later section (the create limiter's
//! queues, per project and method group) is one more optional key that older readers ignore.
//!
//! Bounded whatever the tenants do: the memory only holds places that stocked out in the last
//! few hours ([`super::memory::RESET_AFTER`]), and at most [`MAX_PLACES`] of them are written
//! (the most recently blocked first), with the number left out said, so that a tenant who spreads
//! slices over many zones and accelerator types cannot grow the ConfigMap toward its 1 MiB limit.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::memory::{Place, Remembered};

/// The ConfigMap, in the operator's namespace, the leader publishes the snapshot into.
pub const CONFIGMAP: &str = "tpu-operator-capacity";
/// Its key holding the snapshot as JSON.
pub const KEY: &str = "snapshot.json";
/// The most places written. About 250 bytes each, so at most about 125 KiB: far below a
/// ConfigMap's 1 MiB, and more places than an operator has zones times accelerator types times
/// capacity kinds for any one team.
pub const MAX_PLACES: usize = 500;

/// The stockout memory at `generated_at`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// When it was taken (the process's clock: the emulated one under `local`).
    pub generated_at: Option<DateTime<Utc>>,
    /// The places remembered, the most recently blocked first.
    #[serde(default)]
    pub places: Vec<PlaceMemory>,
    /// Places remembered but left out past [`MAX_PLACES`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: usize,
    /// The create limiter's lines that sent or held waiters in the last minute (one per project
    /// and method group, and region where Google counts so: a handful).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limiter: Vec<LineMemory>,
}

/// One line of the create limiter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LineMemory {
    pub project: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The method group (`tpuCreate`, `computeMutate`, `dataprocBatchCreate`, `vertexJobCreate`).
    pub group: String,
    /// Google's quota as configured, per minute.
    pub quota: u32,
    /// The most the line sends in any minute now (below 95 % of the quota after refusals).
    pub per_minute: u32,
    /// Creates sent in the last 60 s.
    pub sent: usize,
    pub waiting: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_turn: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_until: Option<DateTime<Utc>>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One place the memory holds: it stocked out lately.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlaceMemory {
    pub project: String,
    pub zone: String,
    pub accelerator: String,
    /// The capacity kind as the spec names it (`onDemand`, `spot`, `flexStart`).
    pub kind: String,
    /// When the last stockout that counted came back.
    pub last_stockout: DateTime<Utc>,
    /// Stockouts in a row.
    pub strikes: u32,
    /// Not asked before this; past it, the next create there probes.
    pub blocked_until: DateTime<Utc>,
    /// When the create now probing the place lapses, if one is (omitted when none is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_until: Option<DateTime<Utc>>,
}

/// Where a remembered place stands at a given time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlaceState {
    /// Not asked until its block ends.
    Blocked,
    /// The block is over and one create is asking; the others wait for its answer.
    Probing,
    /// The block is over and nobody asks yet: the next create there probes.
    Open,
}

impl PlaceState {
    pub fn name(self) -> &'static str {
        match self {
            Self::Blocked => "blocked",
            Self::Probing => "probing",
            Self::Open => "open",
        }
    }
}

impl PlaceMemory {
    /// Where the place stands at `now` (a snapshot read later than it was taken says what its
    /// times mean then).
    pub fn state(&self, now: DateTime<Utc>) -> PlaceState {
        if self.blocked_until > now {
            PlaceState::Blocked
        } else if self.probe_until.is_some_and(|u| u > now) {
            PlaceState::Probing
        } else {
            PlaceState::Open
        }
    }
}

impl Snapshot {
    /// The memory's places at `now`, at most [`MAX_PLACES`] of them: the most recently blocked
    /// first, so the ones cut are those closest to being forgotten anyway.
    pub fn of<'a>(remembered: impl Iterator<Item = (&'a Place, Remembered)>, now: DateTime<Utc>) -> Self {
        let mut places: Vec<PlaceMemory> = remembered
            .map(|(place, r)| PlaceMemory {
                project: place.project.clone(),
                zone: place.zone.clone(),
                accelerator: place.accelerator.clone(),
                kind: place.kind.to_owned(),
                last_stockout: floor_second(r.last_stockout),
                strikes: r.strikes,
                blocked_until: ceil_second(r.blocked_until),
                probe_until: r.probe_until.filter(|u| *u > now).map(ceil_second),
            })
            .collect();
        places.sort_by(|a, b| {
            b.blocked_until.cmp(&a.blocked_until).then_with(|| {
                (&a.project, &a.zone, &a.accelerator, &a.kind).cmp(&(
                    &b.project,
                    &b.zone,
                    &b.accelerator,
                    &b.kind,
                ))
            })
        });
        let omitted = places.len().saturating_sub(MAX_PLACES);
        places.truncate(MAX_PLACES);
        Self {
            generated_at: Some(floor_second(now)),
            places,
            omitted,
            limiter: Vec::new(),
        }
    }

    /// With the create limiter's `lines`.
    pub fn with_lines(mut self, lines: Vec<super::limiter::LineNow>) -> Self {
        self.limiter = lines
            .into_iter()
            .map(|l| LineMemory {
                project: l.line.project,
                region: l.line.region,
                group: l.line.group.as_str().to_owned(),
                quota: l.quota,
                per_minute: l.per_minute,
                sent: l.sent,
                waiting: l.waiting,
                next_turn: l.next_turn.map(ceil_second),
                paused_until: l.paused_until.map(ceil_second),
            })
            .collect();
        self
    }

    /// Whether `other` says the same about the places and the limiter's lines (when it was
    /// taken aside): the publisher writes only what changed.
    pub fn same_places(&self, other: &Self) -> bool {
        self.places == other.places && self.omitted == other.omitted && self.limiter == other.limiter
    }
}

/// Whole seconds keep the JSON short and readable.
fn floor_second(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(t)
}

/// An end rounded up, so a reader never sees a place open before the memory does.
fn ceil_second(t: DateTime<Utc>) -> DateTime<Utc> {
    let up = i64::from(t.timestamp_subsec_nanos() > 0);
    DateTime::from_timestamp(t.timestamp() + up, 0).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn place(zone: &str) -> Place {
        Place {
            project: "team-a".into(),
            zone: zone.into(),
            accelerator: "v6e-8".into(),
            kind: "spot",
        }
    }

    fn remembered(blocked_for: i64, probe_for: Option<i64>) -> Remembered {
        Remembered {
            last_stockout: t0(),
            strikes: 2,
            blocked_until: t0() + Duration::minutes(blocked_for),
            probe_until: probe_for.map(|m| t0() + Duration::minutes(m)),
        }
    }

    #[test]
    fn places_come_most_recently_blocked_first_with_their_times_and_a_lapsed_probe_is_dropped() {
        let (a, b) = (place("us-east5-a"), place("us-east5-b"));
        let entries = [(&a, remembered(5, None)), (&b, remembered(10, Some(-1)))];
        let snapshot = Snapshot::of(entries.into_iter(), t0());
        let zones: Vec<&str> = snapshot.places.iter().map(|p| p.zone.as_str()).collect();
        assert_eq!(zones, ["us-east5-b", "us-east5-a"]);
        assert_eq!(
            snapshot.places[0].probe_until, None,
            "a probe that lapsed is not shown"
        );
        assert_eq!(snapshot.places[1].kind, "spot");
        assert_eq!(snapshot.generated_at, Some(t0()));
        assert_eq!(snapshot.omitted, 0);
    }

    #[test]
    fn at_most_max_places_are_kept_and_the_rest_are_counted() {
        let places: Vec<Place> = (0..MAX_PLACES + 7)
            .map(|i| place(&format!("zone-{i:04}")))
            .collect();
        let entries = places
            .iter()
            .enumerate()
            .map(|(i, p)| (p, remembered(i as i64, None)));
        let snapshot = Snapshot::of(entries, t0());
        assert_eq!(snapshot.places.len(), MAX_PLACES);
        assert_eq!(snapshot.omitted, 7);
        // The 7 blocked the shortest (blocked_for 0..7) are the ones left out.
        assert!(
            snapshot
                .places
                .iter()
                .all(|p| p.blocked_until >= t0() + Duration::minutes(7))
        );
        let text = serde_json::to_string(&snapshot).unwrap();
        assert!(text.len() < 256 * 1024, "{} bytes", text.len());
    }

    #[test]
    fn state_follows_the_readers_clock() {
        let a = place("us-east5-a");
        let snapshot = Snapshot::of([(&a, remembered(5, Some(7)))].into_iter(), t0());
        let p = &snapshot.places[0];
        assert_eq!(p.state(t0()), PlaceState::Blocked);
        assert_eq!(p.state(t0() + Duration::minutes(6)), PlaceState::Probing);
        assert_eq!(p.state(t0() + Duration::minutes(8)), PlaceState::Open);
    }

    #[test]
    fn json_round_trips_in_camel_case_and_unknown_sections_are_ignored() {
        let a = place("us-east5-a");
        let snapshot = Snapshot::of([(&a, remembered(5, Some(6)))].into_iter(), t0());
        let text = serde_json::to_string(&snapshot).unwrap();
        assert!(
            text.contains("\"blockedUntil\":\"2027-01-15T08:05:00Z\""),
            "{text}"
        );
        assert!(!text.contains("omitted"), "{text}");
        assert_eq!(serde_json::from_str::<Snapshot>(&text).unwrap(), snapshot);
        // A later writer's extra section does not break this reader.
        let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
        value["reservations"] = serde_json::json!([{"project": "team-a"}]);
        assert_eq!(serde_json::from_value::<Snapshot>(value).unwrap(), snapshot);
    }

    #[test]
    fn the_limiter_s_lines_are_written_and_a_change_in_them_is_a_change() {
        use crate::runtime::capacity::limiter::{Group, Line, LineNow};
        let line = |waiting| LineNow {
            line: Line::in_region(Group::VertexJobCreate, "team-a", "us-central1"),
            quota: 60,
            per_minute: 57,
            sent: 57,
            waiting,
            next_turn: Some(t0() + Duration::milliseconds(30_500)),
            paused_until: None,
        };
        let snapshot = Snapshot::of(std::iter::empty(), t0()).with_lines(vec![line(3)]);
        let text = serde_json::to_string(&snapshot).unwrap();
        for part in [
            "\"group\":\"vertexJobCreate\"",
            "\"region\":\"us-central1\"",
            "\"perMinute\":57",
            "\"nextTurn\":\"2027-01-15T08:00:31Z\"",
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
        assert_eq!(serde_json::from_str::<Snapshot>(&text).unwrap(), snapshot);
        let more = Snapshot::of(std::iter::empty(), t0()).with_lines(vec![line(4)]);
        assert!(!snapshot.same_places(&more), "a new waiter is published");
    }

    #[test]
    fn times_are_whole_seconds_and_ends_round_up() {
        let a = place("us-east5-a");
        let mut r = remembered(5, Some(7));
        r.last_stockout += Duration::milliseconds(900);
        r.blocked_until += Duration::milliseconds(100);
        let snapshot = Snapshot::of([(&a, r)].into_iter(), t0() + Duration::milliseconds(500));
        let p = &snapshot.places[0];
        assert_eq!(p.last_stockout, t0());
        assert_eq!(p.blocked_until, t0() + Duration::seconds(5 * 60 + 1));
        assert_eq!(snapshot.generated_at, Some(t0()));
    }

    #[test]
    fn a_new_generation_time_alone_is_no_change() {
        let a = place("us-east5-a");
        let before = Snapshot::of([(&a, remembered(5, None))].into_iter(), t0());
        let later = Snapshot::of(
            [(&a, remembered(5, None))].into_iter(),
            t0() + Duration::seconds(5),
        );
        assert!(before.same_places(&later));
        let struck = Snapshot::of([(&a, remembered(10, None))].into_iter(), t0());
        assert!(!before.same_places(&struck));
    }
}
