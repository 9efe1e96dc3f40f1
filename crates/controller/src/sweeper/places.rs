//! Which learned places the sweeper keeps listing. Pure: no I/O.
//!
//! A place (a project with a TPU zone, or with a Dataproc / Vertex region) is **learned** from the
//! objects that use it: the cloud resource names the operator wrote in their status, and the spec
//! of an object the operator has not refused ([`crate::sweeper::list::live`]). A
//! tenant names places freely in a spec, so what it can make the sweeper list is limited three
//! ways:
//!
//! - a refused object (policy-denied, invalid, or refused by GCP's permissions) teaches nothing:
//!   nothing was made from its spec;
//! - a place is **pruned** once no object has used it since the previous sweep and this sweep's
//!   listing there found nothing of ours (two sweeps, so a resource made between a sweep's cloud
//!   listing and its object listing is still looked for);
//! - each namespace teaches at most [`MAX_PLACES_PER_NAMESPACE`] places; places it names beyond
//!   that are not learned (places it already taught are preferred: they may hold its orphans) and
//!   the sweep reports them.
//!
//! Configured places are not learned places: they are listed on every sweep, never pruned.

use std::collections::{BTreeMap, BTreeSet};

/// How many places one namespace's objects can make the sweeper list. 16 covers a team using
/// every TPU zone of a few regions; beyond it a namespace would mostly be naming places to make
/// the operator call GCP (every place costs three list calls per sweep).
pub const MAX_PLACES_PER_NAMESPACE: usize = 16;

/// A zone (TPU nodes, queued resources, Compute Engine instances) or a region (Dataproc
/// batches, Vertex custom jobs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    Zone,
    Region,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Self::Zone => "zone",
            Self::Region => "region",
        }
    }
}

/// `(scope, project, location)`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    pub scope: Scope,
    pub project: String,
    pub location: String,
}

impl Place {
    pub fn new(scope: Scope, project: impl Into<String>, location: impl Into<String>) -> Self {
        Self {
            scope,
            project: project.into(),
            location: location.into(),
        }
    }

    /// The place of a resource name `projects/<p>/locations/<l>/...`.
    pub fn of(scope: Scope, name: &str) -> Option<Self> {
        let mut parts = name.split('/');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("projects"), Some(p), Some("locations"), Some(l)) if !p.is_empty() && !l.is_empty() => {
                Some(Self::new(scope, p, l))
            }
            _ => None,
        }
    }

    /// `zone projects/<p>/locations/<l>`: how the summary ConfigMap and the report name it.
    pub fn to_line(&self) -> String {
        format!(
            "{} projects/{}/locations/{}",
            self.scope.as_str(),
            self.project,
            self.location
        )
    }
}

/// What the sweeper remembers of a learned place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// The namespaces whose objects taught it (its cost is counted against theirs). Empty for a
    /// place read back from an older summary, which did not record them.
    pub namespaces: BTreeSet<String>,
    /// No object used it at the end of the last sweep: pruned once a sweep finds nothing there.
    pub idle: bool,
}

/// Every learned place.
pub type Learned = BTreeMap<Place, Entry>;

/// What this sweep's objects use: namespace → places.
pub type Used = BTreeMap<String, BTreeSet<Place>>;

/// The learned places after a sweep, and what was dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub learned: Learned,
    /// Idle places where this sweep found nothing: no longer listed.
    pub pruned: Vec<Place>,
    /// Places a namespace named beyond its bound, not learned: `(namespace, place)`.
    pub over_bound: Vec<(String, Place)>,
}

/// The learned places after a sweep: `prev` (before it), `used` (by its objects), `quiet` (listed
/// this sweep: every list there answered, and none had a resource of ours).
pub fn next(prev: &Learned, used: &Used, quiet: &BTreeSet<Place>, bound: usize) -> Outcome {
    let users = users_of(used);
    let mut out = Outcome::default();
    for (place, entry) in prev {
        if users.contains_key(place) {
            continue;
        }
        if entry.idle && quiet.contains(place) {
            out.pruned.push(place.clone());
        } else {
            let idle = Entry {
                namespaces: entry.namespaces.clone(),
                idle: true,
            };
            out.learned.insert(place.clone(), idle);
        }
    }
    for (place, namespaces) in users {
        let entry = Entry {
            namespaces,
            idle: false,
        };
        out.learned.insert(place, entry);
    }
    out.over_bound = bound_per_namespace(&mut out.learned, prev, bound);
    out
}

/// Place → the namespaces using it.
fn users_of(used: &Used) -> BTreeMap<Place, BTreeSet<String>> {
    let mut users: BTreeMap<Place, BTreeSet<String>> = BTreeMap::new();
    for (ns, places) in used {
        for place in places {
            users.entry(place.clone()).or_default().insert(ns.clone());
        }
    }
    users
}

/// Keeps at most `bound` places per namespace, those it taught before first; a place over one
/// namespace's bound stays when another namespace keeps it, else it is dropped.
fn bound_per_namespace(learned: &mut Learned, prev: &Learned, bound: usize) -> Vec<(String, Place)> {
    let mut per_ns: BTreeMap<String, Vec<Place>> = BTreeMap::new();
    for (place, entry) in learned.iter() {
        for ns in &entry.namespaces {
            per_ns.entry(ns.clone()).or_default().push(place.clone());
        }
    }
    let mut over = Vec::new();
    for (ns, mut places) in per_ns {
        if places.len() <= bound {
            continue;
        }
        // Known places first (stable sort keeps each group in place order).
        places.sort_by_key(|p| !prev.get(p).is_some_and(|e| e.namespaces.contains(&ns)));
        for place in places.split_off(bound) {
            if let Some(entry) = learned.get_mut(&place) {
                entry.namespaces.remove(&ns);
            }
            over.push((ns.clone(), place));
        }
    }
    learned.retain(|place, entry| !entry.namespaces.is_empty() || over.iter().all(|(_, p)| p != place));
    over
}

/// One line per place as the summary ConfigMap keeps them: configured places marked
/// `configured` (read back as nothing: the configuration says them), learned ones with the
/// namespaces that taught them and whether they are idle.
pub fn to_lines(configured: &BTreeSet<Place>, learned: &Learned) -> String {
    let configured = configured
        .iter()
        .filter(|p| !learned.contains_key(p))
        .map(|p| format!("{} configured", p.to_line()));
    let learned = learned.iter().map(|(p, e)| {
        let mut line = p.to_line();
        if !e.namespaces.is_empty() {
            let ns: Vec<&str> = e.namespaces.iter().map(String::as_str).collect();
            line.push_str(&format!(" ns={}", ns.join(",")));
        }
        if e.idle {
            line.push_str(" idle");
        }
        line
    });
    configured.chain(learned).collect::<Vec<_>>().join("\n")
}

/// Reads [`to_lines`]' format back (and the older one, a bare `zone projects/<p>/locations/<l>`
/// a line: learned, namespaces unknown, not idle). Lines it does not understand are skipped.
pub fn from_lines(text: &str) -> Learned {
    let mut learned = Learned::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let scope = match words.next() {
            Some("zone") => Scope::Zone,
            Some("region") => Scope::Region,
            _ => continue,
        };
        let Some(place) = words.next().and_then(|name| Place::of(scope, name)) else {
            continue;
        };
        let mut entry = Entry::default();
        let mut configured = false;
        for word in words {
            match word {
                "configured" => configured = true,
                "idle" => entry.idle = true,
                _ => {
                    if let Some(ns) = word.strip_prefix("ns=") {
                        entry
                            .namespaces
                            .extend(ns.split(',').filter(|n| !n.is_empty()).map(str::to_owned));
                    }
                }
            }
        }
        if !configured {
            learned.insert(place, entry);
        }
    }
    learned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(l: &str) -> Place {
        Place::new(Scope::Zone, "p", l)
    }

    fn used(entries: &[(&str, &[Place])]) -> Used {
        entries
            .iter()
            .map(|(ns, places)| (ns.to_string(), places.iter().cloned().collect()))
            .collect()
    }

    #[test]
    fn a_place_no_object_uses_is_pruned_after_a_sweep_finds_nothing_there() {
        let a = zone("us-east5-b");
        let b = zone("us-east5-a");
        let first = next(
            &Learned::new(),
            &used(&[("team-a", &[a.clone(), b.clone()])]),
            &BTreeSet::new(),
            16,
        );
        assert_eq!(first.learned.len(), 2);
        assert!(first.learned.values().all(|e| !e.idle));

        // The objects are gone: both places become idle, none is pruned yet (this sweep's
        // listing ran while they were still used).
        let quiet = BTreeSet::from([a.clone(), b.clone()]);
        let second = next(&first.learned, &Used::new(), &quiet, 16);
        assert!(second.pruned.is_empty());
        assert!(second.learned.values().all(|e| e.idle));

        // Next sweep: `a` was quiet, `b` still holds something of ours (an orphan) or failed to
        // list: only `a` goes.
        let third = next(&second.learned, &Used::new(), &BTreeSet::from([a.clone()]), 16);
        assert_eq!(third.pruned, vec![a.clone()]);
        assert_eq!(third.learned.keys().collect::<Vec<_>>(), vec![&b]);

        // An idle place used again is no longer idle.
        let again = next(
            &third.learned,
            &used(&[("team-b", std::slice::from_ref(&b))]),
            &BTreeSet::from([b.clone()]),
            16,
        );
        assert!(again.pruned.is_empty());
        assert_eq!(
            again.learned[&b],
            Entry {
                namespaces: BTreeSet::from(["team-b".to_string()]),
                idle: false
            }
        );
    }

    #[test]
    fn one_namespace_teaches_at_most_the_bound_and_keeps_what_it_taught_first() {
        let zones: Vec<Place> = (0..6).map(|i| zone(&format!("z{i}"))).collect();
        let first = next(
            &Learned::new(),
            &used(&[("team-a", &zones[3..5])]),
            &BTreeSet::new(),
            2,
        );
        assert!(first.over_bound.is_empty());
        let all = next(
            &first.learned,
            &used(&[("team-a", &zones), ("team-b", &zones[..1])]),
            &BTreeSet::new(),
            2,
        );
        let kept: Vec<_> = all.learned.keys().map(|p| p.location.as_str()).collect();
        // team-a keeps z3 and z4 (taught first); z0 stays because team-b uses it.
        assert_eq!(kept, ["z0", "z3", "z4"]);
        assert_eq!(
            all.learned[&zones[0]].namespaces,
            BTreeSet::from(["team-b".to_string()])
        );
        let over: Vec<_> = all
            .over_bound
            .iter()
            .map(|(ns, p)| (ns.as_str(), p.location.as_str()))
            .collect();
        assert_eq!(
            over,
            [
                ("team-a", "z0"),
                ("team-a", "z1"),
                ("team-a", "z2"),
                ("team-a", "z5")
            ]
        );
    }

    #[test]
    fn places_round_trip_through_the_summary_lines_and_configured_ones_are_not_learned() {
        let mut learned = Learned::new();
        learned.insert(
            zone("us-east5-b"),
            Entry {
                namespaces: BTreeSet::from(["team-a".to_string(), "team-b".to_string()]),
                idle: true,
            },
        );
        learned.insert(Place::new(Scope::Region, "p2", "europe-west4"), Entry::default());
        let configured = BTreeSet::from([zone("asia-northeast1-b")]);
        let text = to_lines(&configured, &learned);
        assert!(
            text.contains("zone projects/p/locations/asia-northeast1-b configured"),
            "{text}"
        );
        assert!(
            text.contains("zone projects/p/locations/us-east5-b ns=team-a,team-b idle"),
            "{text}"
        );
        assert_eq!(from_lines(&text), learned);
        // The older format: a bare place a line.
        let old = from_lines("zone projects/p/locations/z\ngarbage\nregion x\n");
        assert_eq!(
            old.into_iter().collect::<Vec<_>>(),
            vec![(zone("z"), Entry::default())]
        );
        assert_eq!(Place::of(Scope::Zone, "not/a/resource/name"), None);
    }
}
