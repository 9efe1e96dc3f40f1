//! TPU VM mode's completion markers under `modelDir`, and what status may say of one.

use tpu_operator_api::training_pipeline::{StageName, TrainingPipeline};
use tpu_operator_gcp::parse_gs_uri;

use super::super::{
    plan::Marker,
    status::{stage, to_chrono},
};
use crate::reconcile::context::Context;
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
pub(super) async fn marker(ctx: &Context, tp: &TrainingPipeline) -> Result<Marker> {
    let Some(started) = tp
        .status
        .as_ref()
        .and_then(|s| stage(s, StageName::Train).start_time.as_ref().map(to_chrono))
    else {
        return Ok(Marker::None);
    };
    let dir = &tp.spec.artifacts.model_dir;
    let Some(uri) = parse_gs_uri(dir) else {
        return Ok(Marker::None);
    };
    let prefix = format!("{}_", uri.path);
    let objects = ctx.gcp.storage.list_objects(uri.bucket, &prefix, 10).await;
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
        let content = ctx.gcp.storage.read_object(&uri).await.unwrap_or_default();
        return Ok(Marker::Failed {
            detail: format!("{uri} written ({})", exit_code(&content)),
            exit_code: content.trim().parse().ok(),
        });
    }
    Ok(Marker::None)
}

#[cfg(test)]
mod tests {
    /// Only an exit code reaches status: another team's object under the named `modelDir` is not
    /// copied (issue 32).
    #[test]
    fn only_an_exit_code_is_copied_into_status() {
        assert_eq!(super::exit_code("3\n"), "exit code 3");
        assert_eq!(super::exit_code(""), "exit code unknown");
        let secret = "team-b: loss=0.12 step=9000 api_key=...";
        let shown = super::exit_code(secret);
        assert!(!shown.contains("team-b") && !shown.contains("loss"), "{shown}");
    }
}
