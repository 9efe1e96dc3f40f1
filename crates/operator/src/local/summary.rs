//! The table printed at the end of `tpu-operator local`: what ran, how it ended, how long each
//! stage took (from the objects' status timestamps), cloud API calls, estimated cost, and what
//! was left behind in the (emulated) cloud.

use std::{collections::BTreeMap, time::Duration};

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::progress::{Key, Outcome, Seen, Tracker, format_duration};

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub object: String,
    pub result: String,
    pub stages: String,
    pub cost: String,
}

/// The result word of an object: its phase, marked when it never finished.
pub fn result(seen: &Seen) -> String {
    match seen.outcome() {
        // Children follow their owner; only applied objects can time out.
        Outcome::Running if seen.applied => format!("Timeout ({})", seen.phase()),
        Outcome::Failed if seen.phase() != "Failed" => format!("Stalled ({})", seen.phase()),
        _ => seen.phase().to_string(),
    }
}

/// Why each failed or stalled object stopped (the Stalled condition's message), for the lines
/// under the table.
pub fn failures(objects: &BTreeMap<Key, Seen>) -> Vec<String> {
    objects
        .iter()
        .filter(|(_, seen)| seen.outcome() == Outcome::Failed)
        .map(|(key, seen)| format!("{key}: {}", seen.stalled_message().unwrap_or(seen.message())))
        .collect()
}

/// Where each slice with a capacity plan landed (or asks), and what had no capacity first: the
/// pipelines' training slices too.
pub fn capacity_plans(objects: &BTreeMap<Key, Seen>) -> Vec<String> {
    objects
        .iter()
        .filter_map(|(key, seen)| {
            let plan = seen.status("capacityPlan")?;
            let plan: tpu_operator_api::tpu_slice::CapacityPlanStatus =
                serde_json::from_value(plan.clone()).ok()?;
            Some(format!("{key}: capacity plan: {}", plan.summary()))
        })
        .collect()
}

/// What interrupted each slice (the pipelines' training slices too): maintenance restarts apart
/// from preemptions, and the last maintenance announced.
pub fn interruptions(objects: &BTreeMap<Key, Seen>) -> Vec<String> {
    objects
        .iter()
        .filter_map(|(key, seen)| {
            let count = |field: &str| seen.status(field).and_then(Value::as_i64).unwrap_or(0);
            let (restarts, preemptions) = (count("maintenanceRestarts"), count("recreations"));
            let last = seen.status("maintenance").cloned();
            let last: Option<tpu_operator_api::tpu_slice::MaintenanceStatus> =
                last.and_then(|m| serde_json::from_value(m).ok());
            let replaced: Vec<i64> = seen
                .status("sliceRestarts")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default();
            let alone = replaced.iter().sum::<i64>();
            if alone > 0 && restarts == 0 && last.is_none() {
                return Some(format!(
                    "{key}: {alone} slice(s) lost and replaced alone (replacements per slice, by slice id: {replaced:?}); the others kept their nodes"
                ));
            }
            if restarts == 0 && last.is_none() {
                return None;
            }
            let mut line =
                format!("{key}: interrupted by {restarts} maintenance(s) and {preemptions} preemption(s)");
            if alone > 0 {
                line.push_str(&format!(", {alone} slice(s) replaced alone"));
            }
            // Emulated time since the slice was first seen, like the live lines: the same on
            // every run.
            let since_seen = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
                let at = DateTime::<Utc>::from_timestamp(t.as_ref()?.0.as_second(), 0)?;
                Some(format_duration(at - seen.first_seen))
            };
            if let Some(after) = last.as_ref().and_then(|m| since_seen(&m.checkpoint_request_time)) {
                line.push_str(&format!(
                    "; a checkpoint was requested {after} in, before the window"
                ));
            }
            if let Some(m) = &last
                && let Some(after) = since_seen(&m.start_request_time)
            {
                let committed = m.committed_checkpoint.as_deref().unwrap_or("it");
                line.push_str(&format!(
                    "; the maintenance was started {after} in, right after {committed} was committed"
                ));
            }
            Some(line)
        })
        .collect()
}

/// Where each applied pipeline's and slice's time and money went (`status.timeSpent`), in
/// emulated time like the table, so the same on every run. A pipeline's own slice is left out:
/// the pipeline's line covers its run.
pub fn time_spent(objects: &BTreeMap<Key, Seen>) -> Vec<String> {
    objects
        .iter()
        .filter(|(_, seen)| seen.applied)
        .filter_map(|(key, seen)| {
            let spent = seen.status("timeSpent")?.clone();
            let spent: tpu_operator_api::training_pipeline::TimeSpent = serde_json::from_value(spent).ok()?;
            Some(format!("{key}: {}", spent.summary()))
        })
        .collect()
}

/// The links each applied object's status carries, and the command that prints its logs. On
/// Google Cloud the links open the Console; here they show what would be there, and the logs
/// of the emulated run are read with `tpu-operator logs` (`--keep` keeps them readable).
pub fn links(objects: &BTreeMap<Key, Seen>) -> Vec<String> {
    let mut out = Vec::new();
    for (key, seen) in objects.iter().filter(|(_, s)| s.applied) {
        let Some(links) = seen.status("links") else {
            continue;
        };
        out.push(format!("{}/{}:", key.kind, key.name));
        for field in ["console", "logs"] {
            if let Some(url) = links.get(field).and_then(Value::as_str) {
                out.push(format!("  {field}: {url}"));
            }
        }
        out.push(format!(
            "  tpu-operator logs {}/{} -n {}",
            key.kind.to_ascii_lowercase(),
            key.name,
            key.namespace
        ));
    }
    out
}

fn time(value: Option<&Value>) -> Option<DateTime<Utc>> {
    let text = value?.as_str()?;
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn span(label: &str, start: Option<DateTime<Utc>>, end: Option<DateTime<Utc>>) -> Option<String> {
    match (start, end) {
        (Some(s), Some(e)) => Some(format!("{label} {}", format_duration(e - s))),
        (Some(_), None) => Some(format!("{label} unfinished")),
        _ => None,
    }
}

/// "Preprocess 3m00s, Train 6m00s" for a pipeline, the run time of a batch, the provisioning
/// time of a slice.
pub fn stages(kind: &str, seen: &Seen) -> String {
    let parts: Vec<String> = match kind {
        "TrainingPipeline" => seen
            .status("stages")
            .and_then(Value::as_array)
            .map(|stages| {
                stages
                    .iter()
                    .filter_map(|s| {
                        let name = s.get("name").and_then(Value::as_str).unwrap_or("?");
                        span(name, time(s.get("startTime")), time(s.get("endTime")))
                    })
                    .collect()
            })
            .unwrap_or_default(),
        "PreprocessBatch" => span(
            "run",
            time(seen.status("startTime")),
            time(seen.status("completionTime")),
        )
        .into_iter()
        .collect(),
        "TpuSlice" => span(
            "provision",
            time(seen.status("createTime")),
            time(seen.status("readyTime")),
        )
        .into_iter()
        .collect(),
        _ => Vec::new(),
    };
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

fn cost(seen: &Seen) -> String {
    seen.status("estimatedCost")
        .and_then(|c| c.get("soFarUsd"))
        .and_then(Value::as_f64)
        .map_or_else(|| "-".into(), |usd| format!("${usd:.2}"))
}

/// One row per object: its result and stages as they were when every applied object had
/// finished (`at_end`), its cost as its status last said it (`last`: after the clean-up, the last
/// status seen before it was deleted), since what was created keeps billing until it is gone.
pub fn rows(at_end: &Tracker, last: &Tracker) -> Vec<Row> {
    at_end
        .ordered()
        .into_iter()
        .map(|(key, seen, depth)| Row {
            object: format!("{}{key}", "  ".repeat(depth)),
            result: result(seen),
            stages: stages(&key.kind, seen),
            cost: cost(last.objects.get(key).unwrap_or(seen)),
        })
        .collect()
}

/// Renders the rows as an aligned table with a header.
pub fn table(rows: &[Row]) -> String {
    let header = Row {
        object: "OBJECT".into(),
        result: "RESULT".into(),
        stages: "STAGES (emulated time)".into(),
        cost: "EST. COST".into(),
    };
    let all: Vec<&Row> = std::iter::once(&header).chain(rows).collect();
    let w = |f: fn(&Row) -> &str| all.iter().map(|r| f(r).chars().count()).max().unwrap_or(0);
    let (wo, wr, ws) = (w(|r| &r.object), w(|r| &r.result), w(|r| &r.stages));
    all.iter()
        .map(|r| {
            format!(
                "{:wo$}  {:wr$}  {:ws$}  {}\n",
                r.object, r.result, r.stages, r.cost
            )
        })
        .collect()
}

/// "123 (tpu 40, dataproc 30, vertex 50, storage 3)" from the emulator's `service.method` counts.
pub fn calls_line(counts: &BTreeMap<String, u64>) -> String {
    let mut by_service: BTreeMap<&str, u64> = BTreeMap::new();
    for (key, n) in counts {
        let service = key.split('.').next().unwrap_or(key);
        *by_service.entry(service).or_default() += n;
    }
    let total: u64 = by_service.values().sum();
    let parts: Vec<String> = by_service.iter().map(|(s, n)| format!("{s} {n}")).collect();
    if parts.is_empty() {
        "0".into()
    } else {
        format!("{total} ({})", parts.join(", "))
    }
}

/// "cloud resources left: N" plus what they are.
pub fn left_line(left: &[gcp_emulator::ResourceSummary]) -> String {
    let mut line = format!("cloud resources left: {}", left.len());
    for r in left {
        line.push_str(&format!("\n  {} {} ({})", r.kind, r.name, r.state));
    }
    line
}

/// Prints the table, then what the objects went through and what the run cost and left.
pub fn print(
    at_end: &Tracker,
    last: &Tracker,
    gcp: &gcp_emulator::Emulator,
    left: Option<&[gcp_emulator::ResourceSummary]>,
    wall: Duration,
) {
    println!();
    print!("{}", table(&rows(at_end, last)));
    for failure in failures(&at_end.objects) {
        println!("  {failure}");
    }
    for plan in capacity_plans(&at_end.objects) {
        println!("  {plan}");
    }
    for line in interruptions(&at_end.objects) {
        println!("  {line}");
    }
    for line in time_spent(&at_end.objects) {
        println!("  {line}");
    }
    let links = links(&at_end.objects);
    if !links.is_empty() {
        println!(
            "links (on Google Cloud they open the Console; the emulated run's logs: `tpu-operator logs`, with --keep):"
        );
        for line in links {
            println!("  {line}");
        }
    }
    println!("cloud API calls: {}", calls_line(&gcp.call_counts()));
    println!("wall time: {:.1}s", wall.as_secs_f64());
    match left {
        Some(left) => println!("{}", left_line(left)),
        None => println!(
            "cloud resources now: {} (not cleaned up)",
            gcp.billable_resources().len()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn seen(status: Value) -> Seen {
        Seen {
            first_seen: Utc::now(),
            finished: None,
            object: json!({ "status": status }),
            gone: false,
            applied: true,
        }
    }

    #[test]
    fn pipeline_row_shows_stage_durations_and_cost() {
        let s = seen(json!({
            "phase": "Succeeded",
            "conditions": [{"type": "Ready", "status": "True"}],
            "stages": [
                {"name": "Preprocess", "startTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:03:00Z"},
                {"name": "Train", "startTime": "2026-01-01T00:03:00Z", "endTime": "2026-01-01T00:09:30Z"},
            ],
            "estimatedCost": {"soFarUsd": 1.234, "perHourUsd": 0.0},
        }));
        assert_eq!(stages("TrainingPipeline", &s), "Preprocess 3m00s, Train 6m30s");
        assert_eq!(result(&s), "Succeeded");
        assert_eq!(cost(&s), "$1.23");
        let unfinished = seen(json!({"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}));
        assert_eq!(stages("PreprocessBatch", &unfinished), "run unfinished");
        assert_eq!(result(&unfinished), "Timeout (Running)");
        let stalled = seen(json!({"phase": "Pending", "conditions": [
            {"type": "Stalled", "status": "True", "message": "declared input(s) do not exist"}]}));
        assert_eq!(result(&stalled), "Stalled (Pending)");
        let objects = BTreeMap::from([(
            Key {
                kind: "PreprocessBatch".into(),
                namespace: "default".into(),
                name: "b".into(),
            },
            stalled,
        )]);
        assert_eq!(
            failures(&objects),
            ["PreprocessBatch/b: declared input(s) do not exist"]
        );
    }

    #[test]
    fn calls_are_summed_per_service() {
        let counts = BTreeMap::from([
            ("tpu.nodes.get".to_string(), 3),
            ("tpu.nodes.create".to_string(), 1),
            ("vertex.customJobs.get".to_string(), 5),
        ]);
        assert_eq!(calls_line(&counts), "9 (tpu 4, vertex 5)");
        assert_eq!(calls_line(&BTreeMap::new()), "0");
    }
}
