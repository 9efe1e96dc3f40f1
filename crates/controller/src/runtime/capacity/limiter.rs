//! One create limiter per (project, method group): the operator's own share of Google's
//! per-project rate quotas, spent in a fair order, so 500 slices created at once make 500
//! creates at the quota's pace instead of 500 calls of which most are refused.
//!
//! **The window.** Google counts each quota per minute: Compute Engine's rate quotas refill "at
//! the start of the next synchronized interval" (60 s windows,
//! <https://cloud.google.com/compute/api-quota>), the other APIs are documented per minute. A
//! line remembers its own calls of the last 60 s and makes a call only while there are fewer
//! than its cap: then no 60 s span, aligned to Google's windows or not (so whatever the skew
//! between the two clocks), holds more than the cap. The cap is the quota less 5 % (at least
//! one call), left to the project's other users (people with `gcloud`, other tools). A refusal
//! from Google (they spent more, or the configured quota is above the real one) pauses the line
//! until the next minute boundary, the earliest Google lets a call through again, and cuts the
//! cap by a quarter; each minute without a refusal gives back a tenth of the full cap.
//!
//! **The line.** Objects that find the window full wait in a line, ordered fairly between
//! tenants (namespaces): an object's place is its rank among its own tenant's waiters, then the
//! time it first asked. A team that asks 500 creates at once puts another team's one create
//! second, not 501st. Each waiter is told its position and when its turn is due (when enough of
//! the window's calls have aged out for it and everyone ahead), and looks again then. A waiter
//! that does not come back within [`GRACE`] of its turn (deleted, or slow) no longer holds back
//! those behind it, and keeps its place for when it returns; after [`FORGET_AFTER`] it is
//! forgotten. The turn is a count in the window, not a reservation, so a clock running faster
//! than the requeues (the emulator's) only makes waiters come back late, never makes more calls
//! than the quota allows.
//!
//! Pure: every method takes `now`; [`super::Capacity`] holds it behind a mutex. Only the leader
//! reconciles, so only the leader spends; a new leader starts with an empty window.

use std::collections::{HashMap, VecDeque};

use chrono::{DateTime, Duration, DurationRound, Utc};

mod quota;

pub use quota::{Group, Limits, Line};

/// How late past its turn a waiter may come and still hold back those behind it.
pub const GRACE: Duration = Duration::seconds(15);
/// How long past its turn a waiter that never came back keeps its place.
pub const FORGET_AFTER: Duration = Duration::minutes(5);
/// Google's window.
const WINDOW: Duration = Duration::minutes(1);
/// The share of the quota left to the project's other users.
const HEADROOM: f64 = 0.05;
/// How much a refusal from Google cuts the cap, and how much of the full cap each minute
/// without one gives back.
const SLOWDOWN: f64 = 0.75;
const RECOVERY_PER_MINUTE: f64 = 0.1;

/// Who asks: the object (its uid), its tenant (its namespace), whose waiters are ranked among
/// themselves, and its kind and name, by which it is woken when its turn comes.
#[derive(Clone, Copy, Debug)]
pub struct Asker<'a> {
    pub who: &'a str,
    pub tenant: &'a str,
    pub kind: &'static str,
    pub name: &'a str,
}

impl<'a> Asker<'a> {
    /// The object `identity` of `kind`, its namespace its tenant.
    pub fn of(identity: &'a tpu_operator_api::naming::ObjectIdentity, kind: &'static str) -> Self {
        Self {
            who: &identity.uid,
            tenant: &identity.namespace,
            kind,
            name: &identity.name,
        }
    }
}

/// A waiter whose turn has come: to be woken (see [`Limiter::due`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

/// What the limiter says to an object about to create.
#[derive(Clone, Debug, PartialEq)]
pub enum Turn {
    /// Call now (a token is spent).
    Go,
    /// Not yet.
    Wait(Waiting),
}

/// A waiter's place in its line.
#[derive(Clone, Debug, PartialEq)]
pub struct Waiting {
    /// 1: next.
    pub position: usize,
    /// Waiters in the line, this one included.
    pub of: usize,
    /// When its turn is due if every waiter ahead takes its own.
    pub due: DateTime<Utc>,
    /// The most calls the line makes in any minute now.
    pub per_minute: f64,
    /// The quota Google was last heard to refuse, and until when the line is paused for it.
    pub paused_until: Option<DateTime<Utc>>,
}

impl Waiting {
    /// What an object's status says while it waits here: its place, the line, and when its
    /// turn is due.
    pub fn message(&self, line: &Line) -> String {
        let at = |t: &DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let paused = self
            .paused_until
            .map(|until| {
                format!(
                    "; Google refused one for its rate quota, so none is sent before {}",
                    at(&until)
                )
            })
            .unwrap_or_default();
        format!(
            "waiting for its turn to create: {} of {} in {}'s line of {}, due at {} (the operator sends at most {:.0} a minute there, under Google's per-minute quota{paused}; config createLimits)",
            self.position,
            self.of,
            line.scope(),
            line.group.noun(),
            at(&self.due),
            self.per_minute,
        )
    }

    /// How long until the turn is due, from `now`.
    pub fn wait(&self, now: DateTime<Utc>) -> std::time::Duration {
        (self.due - now).to_std().unwrap_or_default()
    }
}

/// A line as it stands (see [`Limiter::lines`]).
#[derive(Clone, Debug, PartialEq)]
pub struct LineNow {
    pub line: Line,
    /// Google's quota as configured, per minute.
    pub quota: u32,
    /// The most the line sends in any minute now.
    pub per_minute: u32,
    /// Calls sent in the last 60 s.
    pub sent: usize,
    pub waiting: usize,
    /// The soonest turn a waiter was told.
    pub next_turn: Option<DateTime<Utc>>,
    pub paused_until: Option<DateTime<Utc>>,
}

#[derive(Debug)]
struct Waiter {
    tenant: String,
    kind: &'static str,
    name: String,
    since: DateTime<Utc>,
    due: DateTime<Utc>,
    /// Woken for this `due` already (a wake is sent once; asking again resets it).
    woken: bool,
}

#[derive(Debug)]
struct Window {
    /// The most calls in any 60 s with no refusal heard.
    full_cap: f64,
    /// The most calls in any 60 s now (below `full_cap` after refusals).
    cap: f64,
    /// When the cap last changed by itself (recovery is counted from there).
    recovered: DateTime<Utc>,
    /// This line's calls of the last 60 s, oldest first.
    calls: VecDeque<DateTime<Utc>>,
    paused_until: Option<DateTime<Utc>>,
    waiters: HashMap<String, Waiter>,
}

impl Window {
    fn new(limit: u32, now: DateTime<Utc>) -> Self {
        let limit = f64::from(limit);
        let full_cap = (limit - (limit * HEADROOM).round().max(1.0)).max(1.0);
        Self {
            full_cap,
            cap: full_cap,
            recovered: now,
            calls: VecDeque::new(),
            paused_until: None,
            waiters: HashMap::new(),
        }
    }

    fn age(&mut self, now: DateTime<Utc>) {
        while self.calls.front().is_some_and(|t| *t + WINDOW <= now) {
            self.calls.pop_front();
        }
        if self.paused_until.is_some_and(|until| until <= now) {
            self.paused_until = None;
        }
        let minutes = (now - self.recovered).num_milliseconds() as f64 / 60_000.0;
        if minutes > 0.0 {
            self.cap = (self.cap + self.full_cap * RECOVERY_PER_MINUTE * minutes).min(self.full_cap);
            self.recovered = now;
        }
    }

    /// Whole calls the window allows at once.
    fn slots(&self) -> usize {
        self.cap.floor().max(1.0) as usize
    }

    /// When call number `n` from now (1: the next) may be made, if every call before it is
    /// made as soon as it may: a call may be made once the call `slots` before it has aged out
    /// of the window.
    fn turn_of(&self, n: usize, now: DateTime<Utc>) -> DateTime<Utc> {
        let from = self.paused_until.unwrap_or(now).max(now);
        let (slots, made) = (self.slots(), self.calls.len());
        // Call `made + n` overall; the one `slots` before it is the one it waits out.
        let overall = made + n;
        if overall <= slots {
            return from;
        }
        // Steps of `slots` back to a call already made (or to before the first).
        let steps = n.div_ceil(slots);
        let base = overall as i64 - (steps * slots) as i64;
        let after_made = match usize::try_from(base) {
            Ok(b) if b >= 1 => self.calls[b - 1] + WINDOW * steps as i32,
            _ => from + WINDOW * (steps as i32 - 1),
        };
        after_made.max(from + WINDOW * (steps as i32 - 1))
    }

    /// The fair order's key of each waiter: its rank among its tenant's waiters, then when it
    /// first asked (the uid breaks ties, so the order never depends on a hash).
    fn order(&self) -> Vec<(usize, DateTime<Utc>, &str)> {
        let mut by_tenant: HashMap<&str, Vec<(DateTime<Utc>, &str)>> = HashMap::new();
        for (who, w) in &self.waiters {
            by_tenant.entry(&w.tenant).or_default().push((w.since, who));
        }
        let mut order = Vec::with_capacity(self.waiters.len());
        for mut waiters in by_tenant.into_values() {
            waiters.sort_unstable();
            order.extend(
                waiters
                    .into_iter()
                    .enumerate()
                    .map(|(rank, (since, who))| (rank, since, who)),
            );
        }
        order.sort_unstable();
        order
    }
}

/// Every line of the process.
#[derive(Debug, Default)]
pub struct Limiter {
    limits: Limits,
    lines: HashMap<Line, Window>,
}

impl Limiter {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            lines: HashMap::new(),
        }
    }

    /// May `asker` call now on `line`? `Go` counts the call: the caller makes it.
    pub fn turn(&mut self, line: &Line, asker: Asker<'_>, now: DateTime<Utc>) -> Turn {
        let Some(&limit) = self.limits.0.get(&line.group) else {
            return Turn::Go;
        };
        let window = self
            .lines
            .entry(line.clone())
            .or_insert_with(|| Window::new(limit, now));
        window.age(now);
        window.waiters.retain(|_, w| now < w.due + FORGET_AFTER);
        window
            .waiters
            .entry(asker.who.to_owned())
            .or_insert_with(|| Waiter {
                tenant: asker.tenant.to_owned(),
                kind: asker.kind,
                name: asker.name.to_owned(),
                since: now,
                due: now,
                woken: false,
            });
        // Those ahead that still count: before this asker in the fair order, and not overdue.
        let ahead = window
            .order()
            .into_iter()
            .take_while(|(_, _, who)| *who != asker.who)
            .filter(|(_, _, who)| now <= window.waiters[*who].due + GRACE)
            .count();
        let due = window.turn_of(ahead + 1, now);
        if due <= now {
            window.calls.push_back(now);
            window.waiters.remove(asker.who);
            return Turn::Go;
        }
        if let Some(w) = window.waiters.get_mut(asker.who) {
            w.due = due;
            w.woken = false;
        }
        Turn::Wait(Waiting {
            position: ahead + 1,
            of: window.waiters.len(),
            due,
            per_minute: window.cap.floor(),
            paused_until: window.paused_until,
        })
    }

    /// Google refused a call on `line` for its rate quota: nothing more until the next minute
    /// window, and a lower cap after it.
    pub fn refused(&mut self, line: &Line, now: DateTime<Utc>) {
        let Some(window) = self.lines.get_mut(line) else {
            return;
        };
        window.age(now);
        window.cap = (window.cap * SLOWDOWN).max(1.0);
        let minute = now.duration_trunc(WINDOW).unwrap_or(now);
        window.paused_until = Some(minute + WINDOW);
    }

    /// The waiters of `kind` whose turn has come by `now` and that were not woken for it yet:
    /// each is marked woken, so a clock that runs ahead of the requeues (the emulator's) still
    /// brings every waiter back at its turn, once.
    pub fn due(&mut self, kind: &str, now: DateTime<Utc>) -> Vec<Due> {
        let mut due = Vec::new();
        for window in self.lines.values_mut() {
            for (uid, w) in &mut window.waiters {
                if w.kind == kind && !w.woken && w.due <= now {
                    w.woken = true;
                    due.push(Due {
                        uid: uid.clone(),
                        namespace: w.tenant.clone(),
                        name: w.name.clone(),
                    });
                }
            }
        }
        due
    }

    /// Every line that sent or holds waiters in the last minute, as it stands at `now`.
    pub fn lines(&mut self, now: DateTime<Utc>) -> Vec<LineNow> {
        let mut lines: Vec<LineNow> = self
            .lines
            .iter_mut()
            .filter_map(|(line, window)| {
                window.age(now);
                if window.calls.is_empty() && window.waiters.is_empty() {
                    return None;
                }
                Some(LineNow {
                    line: line.clone(),
                    quota: self.limits.0.get(&line.group).copied().unwrap_or_default(),
                    per_minute: window.cap.floor() as u32,
                    sent: window.calls.len(),
                    waiting: window.waiters.len(),
                    next_turn: window.waiters.values().map(|w| w.due).min(),
                    paused_until: window.paused_until,
                })
            })
            .collect();
        lines.sort_by(|a, b| a.line.cmp(&b.line));
        lines
    }

    /// How many wait on `line`.
    pub fn waiting(&self, line: &Line) -> usize {
        self.lines.get(line).map_or(0, |w| w.waiters.len())
    }
}

#[cfg(test)]
mod tests;
