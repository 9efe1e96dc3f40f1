//! `spec.capacityPlan`: capacity kinds and zones to try in order, and `status.capacityPlan`, where
//! the slice stands on them. The controller runs the slice on one rung and zone at a time, as if
//! the spec named that zone and capacity ([`TpuSliceSpec::at`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Capacity, CapacityMode, TpuSliceSpec};
use crate::schema::{DURATION, ZONE};

/// The most rungs a plan may have, and zones a rung may list: each is a create (and, for a
/// waiting kind, a wait) the slice may go through before it runs.
pub const MAX_RUNGS: usize = 8;
pub const MAX_RUNG_ZONES: usize = 8;

/// Capacity to try in order, most preferred first: the slice asks each rung's zones in turn and
/// runs on the first that grants capacity. Mutually exclusive with `capacity`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityPlan {
    /// The rungs, most preferred first (1 to 8).
    #[schemars(length(min = 1, max = 8))]
    pub rungs: Vec<CapacityRung>,
}

/// One rung: one kind of capacity (set exactly one of `onDemand`, `spot`, `reserved`, `queued`,
/// `flexStart`, as in `capacity`), the zones to ask it in, and how long to wait for it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityRung {
    /// The kind of capacity, with its options, as in `spec.capacity`.
    #[serde(flatten)]
    pub capacity: Capacity,
    /// Zones to ask, in order (default: `spec.zone`). Each must offer the accelerator type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), inner(length(max = 63), regex(pattern = ZONE)))]
    pub zones: Vec<String>,
    /// How long to wait for capacity in each zone of this rung before the next zone (or, after
    /// the last zone, the next rung), e.g. `10m`. Unset: `onDemand` and `spot` move on at the
    /// first refusal (a stockout or an exhausted quota); `reserved`, `queued` and `flexStart`
    /// wait by nature, so they need it except in the plan's very last zone, which waits until
    /// capacity comes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub wait_for: Option<String>,
}

impl CapacityRung {
    /// The capacity mode this rung asks for (as `spec.capacity` decides it).
    pub fn mode(&self) -> CapacityMode {
        TpuSliceSpec {
            capacity: Some(self.capacity.clone()),
            ..TpuSliceSpec::default()
        }
        .capacity_mode()
    }

    /// Whether Google may reclaim this rung's capacity (spot, or a queued resource's spot tier).
    pub fn preemptible(&self) -> bool {
        self.capacity.spot.is_some()
            || self
                .capacity
                .queued
                .as_ref()
                .is_some_and(|q| q.tier == super::QueuedTier::Spot)
    }

    /// The rung's zones, `spec.zone` when it lists none.
    pub fn zones_or<'a>(&'a self, spec_zone: &'a str) -> Vec<&'a str> {
        if self.zones.is_empty() {
            vec![spec_zone]
        } else {
            self.zones.iter().map(String::as_str).collect()
        }
    }
}

/// Where a slice stands on its plan: one rung, one of its zones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanPlace {
    /// Index into `spec.capacityPlan.rungs`.
    pub rung: usize,
    /// The zone asked.
    pub zone: String,
}

impl TpuSliceSpec {
    /// The spec as one attempt runs it: at `place`, the rung's zone and capacity stand in for
    /// `spec.zone` and `spec.capacity` (and the plan is gone). Without a plan, or at a place the
    /// plan does not have, the spec itself.
    pub fn at(&self, place: Option<&PlanPlace>) -> TpuSliceSpec {
        let rung = self
            .capacity_plan
            .as_ref()
            .zip(place)
            .and_then(|(plan, at)| plan.rungs.get(at.rung).map(|r| (r, at)));
        let mut spec = self.clone();
        if let Some((rung, at)) = rung {
            spec.zone = at.zone.clone();
            spec.capacity = Some(rung.capacity.clone());
            spec.capacity_plan = None;
        }
        spec
    }

    /// Whether the plan has `place` (a status written for another plan does not count).
    fn has_place(&self, place: &PlanPlace) -> bool {
        self.places().contains(place)
    }

    /// The plan's first place: its first rung's first zone.
    pub fn first_place(&self) -> Option<PlanPlace> {
        let rung = self.capacity_plan.as_ref()?.rungs.first()?;
        Some(PlanPlace {
            rung: 0,
            zone: rung.zones_or(&self.zone)[0].to_owned(),
        })
    }

    /// Every place of the plan in order (rung by rung, zone by zone); the spec's own zone alone
    /// without a plan (`None` rung).
    pub fn places(&self) -> Vec<PlanPlace> {
        let Some(plan) = &self.capacity_plan else {
            return Vec::new();
        };
        plan.rungs
            .iter()
            .enumerate()
            .flat_map(|(rung, r)| {
                r.zones_or(&self.zone).into_iter().map(move |zone| PlanPlace {
                    rung,
                    zone: zone.to_owned(),
                })
            })
            .collect()
    }
}

impl super::TpuSlice {
    /// The capacity plan's place in effect: the one status records (when the plan has it), else
    /// the plan's first; `None` without a plan. The controller runs its passes there, and the
    /// capacity view shows the slice there.
    pub fn place_in_effect(&self) -> Option<PlanPlace> {
        self.spec.capacity_plan.as_ref()?;
        self.status
            .as_ref()
            .and_then(super::TpuSliceStatus::plan_place)
            .filter(|p| self.spec.has_place(p))
            .or_else(|| self.spec.first_place())
    }

    /// Where the incarnation before the current one asked (`None`: no plan, or no earlier one).
    /// Status keeps the last attempts; an incarnation it no longer has asked where the current
    /// one does.
    pub fn previous_place(&self) -> Option<PlanPlace> {
        self.spec.capacity_plan.as_ref()?;
        let status = self.status.as_ref()?;
        let before = status.incarnation().checked_sub(1)?;
        status
            .capacity_plan
            .as_ref()
            .and_then(|p| p.place_of(before))
            .filter(|p| self.spec.has_place(p))
            .or_else(|| self.place_in_effect())
    }
}

/// How one attempt on a rung ended (or that it goes on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AttemptOutcome {
    /// The slice asks here now.
    #[default]
    Trying,
    /// Capacity was granted here: the slice runs on this rung.
    Landed,
    /// No capacity here within the rung's `waitFor`: the slice moved on.
    MovedOn,
    /// The node that landed here was lost (preempted, suspended, evicted): the plan starts again
    /// from its first rung.
    Lost,
}

/// One rung and zone the slice asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RungAttempt {
    /// Index into `spec.capacityPlan.rungs`.
    pub rung: i32,
    /// The rung's capacity kind (`onDemand`, `spot`, `reserved`, `queued`, `flexStart`).
    pub capacity: String,
    /// The zone asked on this attempt.
    pub zone: String,
    /// The slice's incarnation on this attempt (its node's id and create request id follow it).
    pub incarnation: i32,
    pub outcome: AttemptOutcome,
    /// The last reason seen here (`WaitingForCapacity`, `QuotaExceeded`, `Ready`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// What was seen here last, or why the slice moved on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the slice started asking this rung and zone.
    pub start_time: Time,
    /// When the attempt ended; absent while it goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
}

/// Where the slice stands on `spec.capacityPlan`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityPlanStatus {
    /// The rung asked now (index into `spec.capacityPlan.rungs`).
    pub rung: i32,
    /// The zone asked now.
    pub zone: String,
    /// When the slice started asking this rung and zone: its `waitFor` counts from here.
    pub since: Time,
    /// How many times the slice moved to another rung or zone. With `recreations` and
    /// `suspensions` it numbers the incarnation, so each attempt has a node id of its own.
    #[serde(default)]
    pub moves: i32,
    /// The attempts, oldest first (the last 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<RungAttempt>,
}

/// `15m01s`, `2h00m00s`, `45s`: a span of seconds as status messages show it.
fn span(secs: i64) -> String {
    let secs = secs.max(0);
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s:02}s"),
        _ => format!("{h}h{m:02}m{s:02}s"),
    }
}

/// How many attempts status keeps.
pub const KEPT_ATTEMPTS: usize = 16;

impl CapacityPlanStatus {
    /// The rung and zone asked now.
    pub fn place(&self) -> PlanPlace {
        PlanPlace {
            rung: usize::try_from(self.rung).unwrap_or(0),
            zone: self.zone.clone(),
        }
    }

    /// One line on where the slice stands: the rung and zone it landed on (or asks now) and,
    /// since its last start (the first, or after a lost node), the places that had no capacity.
    /// `kubectl describe`-style output and a pipeline's train stage show it.
    pub fn summary(&self) -> String {
        let since_start = self
            .attempts
            .iter()
            .rposition(|a| a.outcome == AttemptOutcome::Lost)
            .map_or(0, |i| i + 1);
        let tried = &self.attempts[since_start.min(self.attempts.len())..];
        let (before, here) = match tried.split_last() {
            Some((here, before)) => (before, Some(here)),
            None => (tried, None),
        };
        let place = |a: &RungAttempt| format!("rung {} ({} in {})", a.rung + 1, a.capacity, a.zone);
        let first = tried.first().map(|a| a.start_time.0.as_second());
        let mut line = match here {
            Some(a) if a.outcome == AttemptOutcome::Landed => {
                let after = first.map_or(0, |f| a.start_time.0.as_second() - f);
                format!("landed on {} {} after its first ask", place(a), span(after))
            }
            Some(a) => format!("asking {}", place(a)),
            None => format!("asking rung {} in {}", self.rung + 1, self.zone),
        };
        if !before.is_empty() {
            let none: Vec<String> = before
                .iter()
                .map(|a| format!("{} in {} ({})", a.capacity, a.zone, a.reason))
                .collect();
            line.push_str(&format!("; no capacity first in: {}", none.join(", ")));
        }
        line
    }

    /// Where incarnation `n` asked, if status still has it.
    pub fn place_of(&self, incarnation: u32) -> Option<PlanPlace> {
        let n = i32::try_from(incarnation).ok()?;
        self.attempts
            .iter()
            .rev()
            .find(|a| a.incarnation == n)
            .map(|a| PlanPlace {
                rung: usize::try_from(a.rung).unwrap_or(0),
                zone: a.zone.clone(),
            })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(plan: serde_json::Value) -> TpuSliceSpec {
        serde_json::from_value(json!({"zone": "us-east5-a", "capacityPlan": plan})).unwrap()
    }

    #[test]
    fn a_place_stands_in_for_the_zone_and_the_capacity() {
        let s = spec(json!({"rungs": [
            {"reserved": {"reservationName": "r"}, "waitFor": "10m"},
            {"spot": {}, "zones": ["us-east5-a", "us-east5-b"]},
        ]}));
        let places = s.places();
        assert_eq!(
            places,
            vec![
                PlanPlace {
                    rung: 0,
                    zone: "us-east5-a".into()
                },
                PlanPlace {
                    rung: 1,
                    zone: "us-east5-a".into()
                },
                PlanPlace {
                    rung: 1,
                    zone: "us-east5-b".into()
                },
            ]
        );
        let at = s.at(Some(&places[2]));
        assert_eq!(
            (at.zone.as_str(), at.capacity_mode()),
            ("us-east5-b", CapacityMode::Spot)
        );
        assert!(at.capacity_plan.is_none());
        assert_eq!(s.at(Some(&places[0])).capacity_mode(), CapacityMode::Reserved);
        assert_eq!(s.first_place(), Some(places[0].clone()));
    }

    #[test]
    fn the_rung_members_are_the_capacity_members() {
        let s = spec(json!({"rungs": [{"queued": {"tier": "Spot"}, "waitFor": "1h"}]}));
        let rung = &s.capacity_plan.as_ref().unwrap().rungs[0];
        assert_eq!(rung.mode(), CapacityMode::Queued);
        assert_eq!(rung.wait_for.as_deref(), Some("1h"));
        let back = serde_json::to_value(rung).unwrap();
        assert_eq!(back, json!({"queued": {"tier": "Spot"}, "waitFor": "1h"}));
    }

    #[test]
    fn the_summary_says_where_the_slice_landed_and_what_had_no_capacity_since_its_start() {
        let at = |s| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        let attempt = |rung, capacity: &str, zone: &str, outcome, reason: &str, start| RungAttempt {
            rung,
            capacity: capacity.into(),
            zone: zone.into(),
            incarnation: 0,
            outcome,
            reason: reason.into(),
            message: String::new(),
            start_time: at(start),
            end_time: None,
        };
        use AttemptOutcome::{Landed, Lost, MovedOn};
        let mut st = CapacityPlanStatus {
            rung: 2,
            zone: "b".into(),
            since: at(0),
            moves: 2,
            attempts: vec![
                attempt(1, "spot", "a", Lost, "Preempted", 0),
                attempt(0, "reserved", "a", MovedOn, "WaitingForCapacity", 100),
                attempt(1, "spot", "a", MovedOn, "WaitingForCapacity", 700),
                attempt(2, "onDemand", "b", Landed, "NodeReady", 1001),
            ],
        };
        assert_eq!(
            st.summary(),
            "landed on rung 3 (onDemand in b) 15m01s after its first ask; no capacity first in: reserved in a (WaitingForCapacity), spot in a (WaitingForCapacity)"
        );
        st.attempts.truncate(2);
        assert_eq!(st.summary(), "asking rung 1 (reserved in a)");
    }

    #[test]
    fn a_spec_without_a_plan_is_itself_everywhere() {
        let s: TpuSliceSpec = serde_json::from_value(json!({"zone": "us-east5-a"})).unwrap();
        assert_eq!(s.at(None), s);
        assert!(s.places().is_empty());
    }
}
