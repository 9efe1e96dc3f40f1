//! TPU VM mode's completion markers under `modelDir`, and what status may say of one.

use tpu_operator_api::training_pipeline::{StageName, TrainingPipeline};
use tpu_operator_gcp::parse_gs_uri;

use super::super::{plan::Marker, status::to_chrono};
use crate::reconcile::handles::Io;
use crate::runtime::error::{ReconcileError, Result};

/// What the status says of a `_FAILED` marker's content. The operator's startup script writes
/// the workload's exit code there and nothing else; anything other than a number (someone else's
/// object under a `modelDir` the tenant named) is not copied into status.
pub fn exit_code(content: &str) -> String {
    match content.trim() {
        "" => "exit code unknown".to_string(),
        c => match c.parse::<i64>() {
            Ok(code) => format!("exit code {code}"),
            Err(_) => format!(
                "its {} bytes are not an exit code and are not shown",
                content.len()
            ),
        },
    }
}

/// TPU VM mode: `_SUCCESS` / `_FAILED` under `modelDir`, written since the current attempt began.
/// A failure's detail ends with the last lines the attempt's container logged (`project`: where
/// its slice runs).
pub(super) async fn marker(io: &Io<'_>, tp: &TrainingPipeline, project: Option<&str>) -> Result<Marker> {
    let Some(started) = tp
        .status
        .as_ref()
        .and_then(|s| s.stage(StageName::Train).start_time.as_ref().map(to_chrono))
    else {
        return Ok(Marker::None);
    };
    let dir = &tp.spec.artifacts.model_dir;
    let Some(uri) = parse_gs_uri(dir) else {
        return Ok(Marker::None);
    };
    let prefix = format!("{}_", uri.path);
    // As the namespace's Google identity: the markers are under a directory the tenant named.
    let storage = io.storage_for(&kube::ResourceExt::namespace(tp).unwrap_or_default());
    let objects = storage.list_objects(uri.bucket, &prefix, 10).await;
    let objects = match objects {
        // The bucket may not exist until the workload writes to it.
        Err(e) if e.is_not_found() => return Ok(Marker::None),
        other => other.map_err(ReconcileError::gcp("list completion markers"))?,
    };
    let fresh = |leaf: &str| {
        objects.iter().any(|o| {
            o.name == format!("{}{leaf}", uri.path)
                && chrono::DateTime::parse_from_rfc3339(&o.updated)
                    .is_ok_and(|t| t.with_timezone(&chrono::Utc) >= started)
        })
    };
    if fresh("_SUCCESS") {
        return Ok(Marker::Succeeded);
    }
    if fresh("_FAILED") {
        let uri = format!("{dir}_FAILED");
        let content = storage.read_object(&uri).await.unwrap_or_default();
        let lines = match project {
            Some(project) => last_lines(io, tp, project).await,
            None => String::new(),
        };
        return Ok(Marker::Failed {
            detail: format!("{uri} written ({}){lines}", exit_code(&content)),
            exit_code: content.trim().parse().ok(),
        });
    }
    Ok(Marker::None)
}

/// Lines of a failed attempt's log shown in its failure message and Event.
const LAST_LINES: i32 = 5;
/// Characters kept of each line.
const LINE_CHARS: usize = 200;
/// Characters of log lines in all: with the rest of the failure message they stay within an
/// Event's 1 KiB note, so the error (the last line) is never the part cut off.
const LINES_CHARS: usize = 600;

/// The last lines the pipeline's current attempt logged (its workload container on every host,
/// through docker's `gcplogs` driver), oldest first, as a suffix of the failure detail; or why
/// they could not be read. The lines are the workload's own output, read
/// from the project the slice runs in: control characters are replaced and each line is cut, so
/// they cannot grow the status without bound.
async fn last_lines(io: &Io<'_>, tp: &TrainingPipeline, project: &str) -> String {
    use tpu_operator_gcp::logging::{
        EntriesQuery, LogSource, Order,
        sources::{ATTEMPT_LABEL, PIPELINE_LABEL},
    };
    let (Some(uid), Some(st)) = (tp.metadata.uid.clone(), tp.status.as_ref()) else {
        return String::new();
    };
    let source = LogSource::Workload {
        project: project.to_string(),
        labels: vec![(PIPELINE_LABEL, uid), (ATTEMPT_LABEL, st.attempts.to_string())],
    };
    let query = EntriesQuery {
        project: project.to_string(),
        // The pipeline and attempt labels name this attempt's container alone; no time bound, so
        // no comparison of the cloud's clock with the operator's.
        filter: source.filter(),
        order: Order::NewestFirst,
        // Every host of a multi-host slice usually prints the same error: more are read than
        // shown, and a line repeated by several hosts is shown once.
        page_size: LAST_LINES * 4,
        page_token: String::new(),
    };
    match io.gcp.logging.list_entries(&query).await {
        Ok(page) if page.lines.is_empty() => "; its container logged nothing".into(),
        Ok(page) => {
            let texts: Vec<String> = page.lines.iter().rev().map(|l| shown(&l.text)).collect();
            format!("; last log lines:\n  {}", last_distinct(texts).join("\n  "))
        }
        Err(e) => format!("; its last log lines could not be read ({})", e.stable_message()),
    }
}

/// The last [`LAST_LINES`] distinct lines of `texts` (oldest first), in the order of their last
/// occurrence, at most [`LINES_CHARS`] characters in all (the newest line always).
fn last_distinct(texts: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut chars = 0;
    for t in texts.into_iter().rev() {
        if out.contains(&t) {
            continue;
        }
        chars += t.chars().count();
        if !out.is_empty() && chars > LINES_CHARS {
            break;
        }
        out.push(t);
        if out.len() == LAST_LINES as usize {
            break;
        }
    }
    out.reverse();
    out
}

/// A log line as status shows it: control and invisible formatting characters (bidi overrides)
/// replaced, cut at [`LINE_CHARS`].
fn shown(text: &str) -> String {
    let one_line = text.replace('\n', " ");
    let mut out: String = tpu_operator_api::text::displayable(&one_line)
        .chars()
        .take(LINE_CHARS)
        .collect();
    if text.chars().count() > LINE_CHARS {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    /// Only an exit code reaches status: another team's object under the named `modelDir` is not
    /// copied.
    #[test]
    fn only_an_exit_code_is_copied_into_status() {
        assert_eq!(super::exit_code("3\n"), "exit code 3");
        assert_eq!(super::exit_code(""), "exit code unknown");
        let secret = "team-b: loss=0.12 step=9000 api_key=...";
        let shown = super::exit_code(secret);
        assert!(!shown.contains("team-b") && !shown.contains("loss"), "{shown}");
    }

    /// A workload's line cannot put a terminal escape, a line break, text reordered by a bidi
    /// override or unbounded text into status.
    #[test]
    fn log_lines_are_cut_and_lose_control_characters() {
        let line = format!("\u{1b}[31mboom\r\n\u{202E}{}", "x".repeat(500));
        let shown = super::shown(&line);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(
            !shown.chars().any(tpu_operator_api::text::is_invisible),
            "{shown:?}"
        );
        assert_eq!(shown.chars().count(), super::LINE_CHARS + 1);
    }

    /// Two hosts printing the same traceback show it once, in order, ending with the error.
    #[test]
    fn lines_repeated_by_hosts_are_shown_once() {
        let host = ["Traceback:", "  File x", "RuntimeError: boom"];
        let both: Vec<String> = host.iter().chain(host.iter()).map(|s| s.to_string()).collect();
        assert_eq!(super::last_distinct(both), host);
        let long: Vec<String> = (0..5).map(|i| format!("{i}{}", "x".repeat(199))).collect();
        let kept = super::last_distinct(long);
        assert_eq!(kept.len(), 3, "600 characters: the last three lines");
        assert!(kept[2].starts_with('4'), "the newest line is kept");
    }
}
