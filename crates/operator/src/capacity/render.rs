//! Prints a [`View`]: one section per source (the stockout memory, the waiting slices, what could
//! not be read), each an aligned table. A later section (the create limiter's queues) is one more
//! function called from [`table`].

use chrono::{DateTime, Utc};
use tpu_operator_controller::runtime::capacity::snapshot::{LineMemory, PlaceMemory, PlaceState, Snapshot};

use super::view::{View, WaitingGroup};

/// Names listed per waiting group before "and N more".
const NAMES_SHOWN: usize = 3;

/// The view as text.
pub fn table(view: &View) -> String {
    let mut out = String::new();
    memory(&mut out, view.memory.as_ref(), view.now);
    out.push('\n');
    if let Some(snapshot) = &view.memory {
        limiter(&mut out, &snapshot.limiter, view.now);
    }
    waiting(&mut out, &view.waiting, view.now);
    if !view.unread.is_empty() {
        out.push_str("\nNot shown (could not be read):\n");
        for line in &view.unread {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out
}

/// The view as JSON (`-o json`): the same fields, times in RFC 3339.
pub fn json(view: &View) -> String {
    serde_json::to_string_pretty(view).expect("the view serializes") + "\n"
}

fn memory(out: &mut String, snapshot: Option<&Snapshot>, now: DateTime<Utc>) {
    let Some(snapshot) = snapshot else {
        out.push_str("Stockout memory: not read (see below)\n");
        return;
    };
    let taken = snapshot.generated_at.map_or_else(
        || "at an unknown time".into(),
        |at| format!("at {} ({})", clock(at), relative(at, now)),
    );
    out.push_str(&format!("Stockout memory (taken {taken})\n"));
    if snapshot.places.is_empty() {
        out.push_str("  no place stocked out in the last 3 hours: every zone is asked freely\n");
        return;
    }
    let header = [
        "PROJECT",
        "ZONE",
        "ACCELERATOR",
        "KIND",
        "STATE",
        "UNTIL",
        "STRIKES",
        "LAST STOCKOUT",
    ];
    let rows: Vec<Vec<String>> = snapshot.places.iter().map(|p| place_row(p, now)).collect();
    out.push_str(&columns(&header, &rows));
    if snapshot.omitted > 0 {
        out.push_str(&format!(
            "  ... and {} more place(s) left out of the snapshot (it keeps the most recently blocked)\n",
            snapshot.omitted
        ));
    }
}

fn place_row(p: &PlaceMemory, now: DateTime<Utc>) -> Vec<String> {
    let state = p.state(now);
    // Until when the state lasts: the block's end, the probe's lapse, or nothing (open).
    let until = match state {
        PlaceState::Blocked => Some(p.blocked_until),
        PlaceState::Probing => p.probe_until,
        PlaceState::Open => None,
    };
    vec![
        p.project.clone(),
        p.zone.clone(),
        p.accelerator.clone(),
        p.kind.clone(),
        state.name().into(),
        until.map_or_else(|| "-".into(), |u| format!("{} ({})", clock(u), relative(u, now))),
        p.strikes.to_string(),
        format!("{} ({})", clock(p.last_stockout), relative(p.last_stockout, now)),
    ]
}

/// The create limiter's lines where something waits its turn, or that Google paused; nothing
/// when none is (a line that only sent is the normal case and says nothing to wait on).
fn limiter(out: &mut String, lines: &[LineMemory], now: DateTime<Utc>) {
    let held: Vec<&LineMemory> = lines
        .iter()
        .filter(|l| l.waiting > 0 || l.paused_until.is_some_and(|u| u > now))
        .collect();
    if held.is_empty() {
        return;
    }
    out.push_str("Create limiter (creates waiting their turn under Google's per-minute quotas)\n");
    let header = [
        "PROJECT",
        "REGION",
        "GROUP",
        "QUOTA",
        "PACE",
        "SENT(60s)",
        "WAITING",
        "NEXT TURN",
        "PAUSED UNTIL",
    ];
    let at = |t: Option<DateTime<Utc>>| {
        t.map_or_else(|| "-".into(), |t| format!("{} ({})", clock(t), relative(t, now)))
    };
    let rows: Vec<Vec<String>> = held
        .iter()
        .map(|l| {
            vec![
                l.project.clone(),
                l.region.clone().unwrap_or_else(|| "-".into()),
                l.group.clone(),
                format!("{}/min", l.quota),
                format!("{}/min", l.per_minute),
                l.sent.to_string(),
                l.waiting.to_string(),
                at(l.next_turn),
                at(l.paused_until.filter(|u| *u > now)),
            ]
        })
        .collect();
    out.push_str(&columns(&header, &rows));
    out.push('\n');
}

fn waiting(out: &mut String, groups: &[WaitingGroup], now: DateTime<Utc>) {
    let total: usize = groups.iter().map(|g| g.slices.len()).sum();
    out.push_str(&format!("Waiting slices ({total})\n"));
    if groups.is_empty() {
        out.push_str("  none\n");
        return;
    }
    let header = [
        "PROJECT",
        "ZONE",
        "ACCELERATOR",
        "KIND",
        "REASON",
        "SLICES",
        "WAITING",
        "NAMES",
    ];
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            vec![
                g.place.project.clone().unwrap_or_else(|| "(default)".into()),
                g.place.zone.clone(),
                g.place.accelerator.clone(),
                g.place.kind.clone(),
                g.reason.clone(),
                g.slices.len().to_string(),
                g.since.map_or_else(|| "-".into(), |s| duration(now - s)),
                names(&g.slices),
            ]
        })
        .collect();
    out.push_str(&columns(&header, &rows));
}

/// The first [`NAMES_SHOWN`] names, then how many more.
fn names(all: &[String]) -> String {
    let shown = all
        .iter()
        .take(NAMES_SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(",");
    match all.len().saturating_sub(NAMES_SHOWN) {
        0 => shown,
        more => format!("{shown} +{more}"),
    }
}

/// Left-aligned columns two spaces apart, the last one unpadded.
fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len() - 1;
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:w$}  "));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn clock(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `in 4m55s` or `3m ago`.
fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if t > now {
        format!("in {}", duration(t - now))
    } else {
        format!("{} ago", duration(now - t))
    }
}

/// `4m55s`, `2h5m`, `12s`: the two largest units.
fn duration(d: chrono::Duration) -> String {
    let s = d.num_seconds().max(0);
    let (h, m, sec) = (s / 3600, s % 3600 / 60, s % 60);
    match (h, m) {
        (0, 0) => format!("{sec}s"),
        (0, _) if sec == 0 => format!("{m}m"),
        (0, _) => format!("{m}m{sec}s"),
        _ if m == 0 => format!("{h}h"),
        _ => format!("{h}h{m}m"),
    }
}

#[cfg(test)]
mod tests {
    use chrono::Duration;
    use tpu_operator_controller::runtime::capacity::memory::{Place, Remembered};

    use super::*;
    use crate::capacity::view::{tests::*, waiting as group_waiting};

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn snapshot() -> Snapshot {
        let place = Place {
            project: "team-a".into(),
            zone: "us-east5-b".into(),
            accelerator: "v6e-8".into(),
            kind: "spot",
        };
        let r = Remembered {
            last_stockout: t0(),
            strikes: 2,
            blocked_until: t0() + Duration::minutes(10),
            probe_until: None,
        };
        Snapshot::of([(&place, r)].into_iter(), t0())
    }

    fn view(now: DateTime<Utc>) -> View {
        let slices: Vec<_> = (0..5)
            .map(|i| {
                slice(
                    "team-a",
                    &format!("s{i}"),
                    "us-east5-b",
                    stocked_out("2027-01-15T08:00:00Z"),
                )
            })
            .collect();
        View {
            now,
            memory: Some(snapshot()),
            waiting: group_waiting(&slices),
            unread: vec!["TpuSlices in namespace team-b: forbidden".into()],
        }
    }

    #[test]
    fn a_line_with_waiters_shows_its_pace_and_next_turn_and_an_idle_one_is_left_out() {
        let mut v = view(t0() + Duration::seconds(5));
        let line = |project: &str, waiting: usize| LineMemory {
            project: project.into(),
            region: None,
            group: "tpuCreate".into(),
            quota: 91,
            per_minute: 86,
            sent: 86,
            waiting,
            next_turn: (waiting > 0).then(|| t0() + Duration::seconds(60)),
            paused_until: None,
        };
        v.memory.as_mut().unwrap().limiter = vec![line("team-a", 114), line("team-b", 0)];
        let text = table(&v);
        let expected = "\
Create limiter (creates waiting their turn under Google's per-minute quotas)
PROJECT  REGION  GROUP      QUOTA   PACE    SENT(60s)  WAITING  NEXT TURN                      PAUSED UNTIL
team-a   -       tpuCreate  91/min  86/min  86         114      2027-01-15T08:01:00Z (in 55s)  -
";
        assert!(text.contains(expected), "{text}");
        assert!(
            !text.lines().any(|l| l.starts_with("team-b")),
            "an idle line is left out: {text}"
        );
        v.memory.as_mut().unwrap().limiter.clear();
        assert!(!table(&v).contains("Create limiter"));
    }

    #[test]
    fn the_table_says_the_block_with_its_expiry_and_who_waits_where() {
        let text = table(&view(t0() + Duration::seconds(5)));
        let expected = "\
Stockout memory (taken at 2027-01-15T08:00:00Z (5s ago))
PROJECT  ZONE        ACCELERATOR  KIND  STATE    UNTIL                            STRIKES  LAST STOCKOUT
team-a   us-east5-b  v6e-8        spot  blocked  2027-01-15T08:10:00Z (in 9m55s)  2        2027-01-15T08:00:00Z (5s ago)

Waiting slices (5)
PROJECT  ZONE        ACCELERATOR  KIND  REASON                         SLICES  WAITING  NAMES
team-a   us-east5-b  v6e-8        spot  WaitingForCapacity (Stockout)  5       5s       team-a/s0,team-a/s1,team-a/s2 +2

Not shown (could not be read):
  TpuSlices in namespace team-b: forbidden
";
        assert_eq!(text, expected, "\n{text}");
    }

    #[test]
    fn past_its_block_a_place_reads_open_with_no_until() {
        let text = table(&view(t0() + Duration::minutes(11)));
        let row = text.lines().nth(2).unwrap();
        assert!(row.contains(" open "), "{row}");
        assert!(row.contains(" -  "), "{row}");
    }

    #[test]
    fn without_the_memory_the_slices_are_still_shown() {
        let mut v = view(t0());
        v.memory = None;
        let text = table(&v);
        assert!(
            text.starts_with("Stockout memory: not read (see below)\n"),
            "{text}"
        );
        assert!(text.contains("Waiting slices (5)"), "{text}");
    }

    #[test]
    fn json_has_the_same_fields() {
        let value: serde_json::Value = serde_json::from_str(&json(&view(t0()))).unwrap();
        assert_eq!(
            value["memory"]["places"][0]["blockedUntil"],
            "2027-01-15T08:10:00Z"
        );
        assert_eq!(value["waiting"][0]["slices"].as_array().unwrap().len(), 5);
        assert_eq!(value["unread"][0], "TpuSlices in namespace team-b: forbidden");
    }

    #[test]
    fn durations_read_in_two_units() {
        assert_eq!(duration(Duration::seconds(12)), "12s");
        assert_eq!(duration(Duration::seconds(295)), "4m55s");
        assert_eq!(duration(Duration::minutes(30)), "30m");
        assert_eq!(duration(Duration::minutes(125)), "2h5m");
    }
}
