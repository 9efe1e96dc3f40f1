//! Spend budgets per calendar period (`spec.budgets`) and what each selected namespace has spent
//! of them (`status.budgets`). Pure: the operator calls [`BudgetUsage::metered`] on every usage
//! refresh, and admissions read [`BudgetUsage::in_force`].
//!
//! How spend stays exact across restarts and leader changes: each refresh credits the namespace's
//! burn rate over the time since `accountedThrough` (whole seconds, the remainder carried) and
//! moves `accountedThrough` by what it credited, in the same status write. A refresh whose write
//! is lost credited nothing; the next one credits the same interval once. The burn rate is the
//! one the refresh reads (`status.namespaces[].spendPerHourUsd`, the estimate behind every
//! object's `estimatedCost`), held over the interval since the last refresh: a rate change is
//! credited at most one refresh late (30 s by default, `--poll-capacity`).

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::{Span, Timestamp, ToSpan, tz::TimeZone},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::status::cents;

/// A calendar period in UTC: a budget's spend starts from zero at each one's start.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum BudgetPeriod {
    /// From 00:00 UTC.
    Day,
    /// From Monday 00:00 UTC (ISO weeks).
    Week,
    /// From the 1st, 00:00 UTC.
    #[default]
    Month,
}

impl BudgetPeriod {
    /// The start of the period holding `at`.
    pub fn start_of(self, at: Timestamp) -> Timestamp {
        let day = at.to_zoned(TimeZone::UTC).date();
        let first = match self {
            Self::Day => day,
            Self::Week => day
                .checked_sub(i64::from(day.weekday().to_monday_zero_offset()).days())
                .unwrap_or(day),
            Self::Month => day.first_of_month(),
        };
        first.to_zoned(TimeZone::UTC).map_or(at, |z| z.timestamp())
    }

    /// The start of the period after the one starting at `start`.
    pub fn next_start(self, start: Timestamp) -> Timestamp {
        let span: Span = match self {
            Self::Day => 1.day(),
            Self::Week => 1.week(),
            Self::Month => 1.month(),
        };
        start
            .to_zoned(TimeZone::UTC)
            .checked_add(span)
            .map_or(start, |z| z.timestamp())
    }
}

/// What the operator does once a namespace's spend in the period reaches a threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum BudgetActionKind {
    /// An Event (`BudgetThresholdReached`) on the policy and on every object of the namespace
    /// that holds capacity; nothing is refused.
    Notify,
    /// New TPU slices and Vertex TPU jobs must use Spot capacity; others wait until the period
    /// ends (or the policy changes). Running objects keep running.
    SpotOnly,
    /// No new TPU slice or Vertex job starts until the period ends (Dataproc batches, whose size
    /// is autoscaled and unknown up front, are not refused); running objects keep running.
    RefuseNewWork,
    /// What `RefuseNewWork` does, and each running `TrainingPipeline` of the namespace is
    /// suspended once it has written a committed checkpoint newer than the moment it saw the
    /// action: its job is cancelled or its slice deleted, and training resumes from that
    /// checkpoint when the period ends (an attempt that spends no retry). A run that writes no
    /// checkpoint keeps running; standalone slices keep running.
    SuspendAtCheckpoint,
}

impl BudgetActionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Notify => "Notify",
            Self::SpotOnly => "SpotOnly",
            Self::RefuseNewWork => "RefuseNewWork",
            Self::SuspendAtCheckpoint => "SuspendAtCheckpoint",
        }
    }
}

/// One threshold of a budget and its action.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetAction {
    /// Percent of `limitUsd` at which the action starts (1 to 1000: over 100 acts past the limit).
    #[schemars(range(min = 1, max = 1000))]
    pub at_percent: u32,
    pub action: BudgetActionKind,
}

/// Estimated US dollars each selected namespace may spend per calendar period, with actions at
/// thresholds. Metered from the same estimate as every object's `status.estimatedCost`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// `Day`, `Week` or `Month` (UTC calendar periods). At most one budget per period.
    pub period: BudgetPeriod,
    /// US dollars per namespace per period.
    #[schemars(range(min = 0.01))]
    pub limit_usd: f64,
    /// What happens at which share of the limit; an action stays in force until the period ends.
    /// Without actions: `RefuseNewWork` at 100 %.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub actions: Vec<BudgetAction>,
}

impl Budget {
    /// The thresholds, lowest first (the default when none are given).
    pub fn thresholds(&self) -> Vec<BudgetAction> {
        let mut actions = if self.actions.is_empty() {
            vec![BudgetAction {
                at_percent: 100,
                action: BudgetActionKind::RefuseNewWork,
            }]
        } else {
            self.actions.clone()
        };
        actions.sort_by_key(|a| (a.at_percent, a.action));
        actions
    }

    /// The dollars at which `action` starts.
    pub fn usd_at(&self, action: &BudgetAction) -> f64 {
        self.limit_usd * f64::from(action.at_percent) / 100.0
    }
}

/// The next threshold a namespace's spend will reach in this period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NextBudgetAction {
    pub action: BudgetActionKind,
    /// The threshold, in percent of `limitUsd` (the budget's `actions[].atPercent`).
    pub at_percent: u32,
    /// The threshold in US dollars: `limitUsd` times `atPercent` / 100.
    pub at_usd: f64,
    /// When it is reached at the namespace's current burn rate; absent when nothing runs or the
    /// period ends first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_time: Option<Time>,
}

/// One namespace's spend in one budget's current period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetUsage {
    /// The selected namespace this spend is for.
    pub namespace: String,
    pub period: BudgetPeriod,
    /// When the current period started (UTC midnight, Monday or the first of the month).
    pub period_start: Time,
    /// When the next period starts (and spend starts again from zero).
    pub period_end: Time,
    /// Estimated US dollars spent since `periodStart`.
    pub spent_usd: f64,
    /// The budget's `limitUsd` this period is metered against.
    pub limit_usd: f64,
    /// Spend is credited up to here: the next refresh credits the time after it, once.
    pub accounted_through: Time,
    /// The actions whose threshold the spend has reached this period, in force until it ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_force: Vec<BudgetActionKind>,
    /// The highest threshold reached this period (`atPercent`): each threshold's Events go out
    /// once, when it is passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached_percent: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_action: Option<NextBudgetAction>,
}

fn seconds(t: &Time) -> i64 {
    t.0.as_second()
}

fn time(s: i64) -> Time {
    Time(Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH))
}

impl BudgetUsage {
    /// `previous` brought up to `now` for `namespace` under `budget`, burning `per_hour_usd`
    /// since `previous.accountedThrough`. A new period (or a budget first seen) starts at zero,
    /// crediting only the time since the period began.
    pub fn metered(
        previous: Option<&BudgetUsage>,
        namespace: &str,
        budget: &Budget,
        per_hour_usd: f64,
        now: Timestamp,
    ) -> BudgetUsage {
        let start = budget.period.start_of(now);
        let (mut spent, from) = match previous {
            Some(p) if p.period == budget.period && seconds(&p.period_start) == start.as_second() => {
                (p.spent_usd, seconds(&p.accounted_through))
            }
            // A first refresh counts from now: what ran before the budget existed is unknown.
            None => (0.0, now.as_second()),
            Some(_) => (0.0, start.as_second()),
        };
        let credited = (now.as_second() - from).max(0);
        spent += per_hour_usd.max(0.0) * credited as f64 / 3600.0;
        let end = budget.period.next_start(start);
        let mut usage = BudgetUsage {
            namespace: namespace.to_owned(),
            period: budget.period,
            period_start: time(start.as_second()),
            period_end: time(end.as_second()),
            spent_usd: spent,
            limit_usd: budget.limit_usd,
            accounted_through: time(from + credited),
            in_force: Vec::new(),
            reached_percent: None,
            next_action: None,
        };
        usage.judge(budget, per_hour_usd);
        usage
    }

    /// Fills `inForce` and `nextAction` from the spend.
    fn judge(&mut self, budget: &Budget, per_hour_usd: f64) {
        self.in_force.clear();
        self.reached_percent = None;
        self.next_action = None;
        for threshold in budget.thresholds() {
            let at_usd = budget.usd_at(&threshold);
            if self.spent_usd >= at_usd {
                self.reached_percent = Some(threshold.at_percent);
                if !self.in_force.contains(&threshold.action) {
                    self.in_force.push(threshold.action);
                }
                continue;
            }
            if self.next_action.is_none() {
                let through = seconds(&self.accounted_through);
                let expected = (per_hour_usd > 0.0)
                    .then(|| through + ((at_usd - self.spent_usd) / per_hour_usd * 3600.0).ceil() as i64)
                    .filter(|at| *at < seconds(&self.period_end));
                self.next_action = Some(NextBudgetAction {
                    action: threshold.action,
                    at_percent: threshold.at_percent,
                    at_usd: cents(at_usd),
                    expected_time: expected.map(time),
                });
            }
        }
    }

    /// Whether `action` is in force.
    pub fn enforces(&self, action: BudgetActionKind) -> bool {
        self.in_force.contains(&action)
    }

    /// `has spent $812.40 of its $1000.00 Month budget`, for refusals and Events.
    pub fn spent_of_budget(&self) -> String {
        format!(
            "has spent ${:.2} of its ${:.2} {:?} budget",
            self.spent_cents(),
            self.limit_usd,
            self.period
        )
    }

    /// The spend as shown: rounded to the cent. The exact figure is kept for metering.
    pub fn spent_cents(&self) -> f64 {
        cents(self.spent_usd)
    }
}

/// `spec.budgets`: a list-map keyed by `period`, so a policy holds one budget per period.
pub(super) fn budgets_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = <Vec<Budget>>::json_schema(generator);
    schema.insert("maxItems".into(), serde_json::json!(3));
    schema.insert("nullable".into(), serde_json::json!(true));
    schema.insert("x-kubernetes-list-type".into(), serde_json::json!("map"));
    schema.insert("x-kubernetes-list-map-keys".into(), serde_json::json!(["period"]));
    schema
}

#[cfg(test)]
mod tests;
