//! Cloud Logging: reading the log entries of the cloud objects the operator made.
//!
//! [`LoggingApi`] is one call, `entries.list`, over Google's `google-cloud-logging-v2` client
//! (whose `ListLogEntries` is REST: `POST /v2/entries:list`). Two readers use it: the
//! `tpu-operator logs` command (with the user's own credentials) and the TrainingPipeline
//! controller, which puts the last lines of a failed TPU VM workload into the failure message.
//! [`sources`] says where each object's logs are and builds the Console links that status shows.

pub mod filter;
pub mod sources;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use google_cloud_logging_v2::{client::LoggingServiceV2, model::LogEntry};

pub use filter::LogFilter;
pub use sources::LogSource;

use crate::{
    error::{ErrorKind, GcpError, Result, Service},
    metrics::GcpMetrics,
};

/// Production endpoint of the Cloud Logging API.
pub const LOGGING_ENDPOINT: &str = "https://logging.googleapis.com";
/// The role that grants `logging.logEntries.list`, named in permission errors.
pub const VIEWER_ROLE: &str = "roles/logging.viewer";
/// Largest page `entries.list` accepts (the REST reference's `pageSize` maximum).
pub const MAX_PAGE_SIZE: i32 = 1000;

/// Which end of the time range a listing starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Oldest first (`timestamp asc`, the API's default).
    OldestFirst,
    /// Newest first (`timestamp desc`): the last lines of a run, one page.
    NewestFirst,
}

/// One `entries.list` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntriesQuery {
    /// The project the entries are in (`resourceNames: ["projects/{project}"]`).
    pub project: String,
    pub filter: LogFilter,
    pub order: Order,
    /// At most [`MAX_PAGE_SIZE`].
    pub page_size: i32,
    /// Empty for the first page.
    pub page_token: String,
}

/// One page of entries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EntriesPage {
    pub lines: Vec<LogLine>,
    /// Empty on the last page.
    pub next_page_token: String,
}

/// One log entry, as a line to show.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogLine {
    pub timestamp: Option<DateTime<Utc>>,
    /// `INFO`, `ERROR`, ... (`DEFAULT` when unset).
    pub severity: String,
    /// `textPayload`, else `jsonPayload.message`, else the JSON payload itself.
    pub text: String,
    /// Unique per entry within a log: `--follow` uses it to drop entries it already printed.
    pub insert_id: String,
    /// The TPU VM host (worker number) that wrote it: the workload container's
    /// `tpu-operator-host` label, or a `tpu_worker` resource's `worker_id`; `None` otherwise.
    pub host: Option<String>,
}

/// The Cloud Logging calls tpu-operator makes.
#[async_trait]
pub trait LoggingApi: Send + Sync {
    /// `entries.list`: one page.
    async fn list_entries(&self, query: &EntriesQuery) -> Result<EntriesPage>;
}

/// [`LoggingApi`] over Google's `LoggingServiceV2` client.
#[derive(Clone, Debug)]
pub struct LoggingClient {
    client: LoggingServiceV2,
    metrics: GcpMetrics,
}

impl LoggingClient {
    pub fn new(client: LoggingServiceV2, metrics: GcpMetrics) -> Self {
        Self { client, metrics }
    }
}

#[async_trait]
impl LoggingApi for LoggingClient {
    async fn list_entries(&self, query: &EntriesQuery) -> Result<EntriesPage> {
        // Named as the permission it needs, `logging.logEntries.list`.
        const METHOD: &str = "logEntries.list";
        let target = format!("projects/{}", query.project);
        let order = match query.order {
            Order::OldestFirst => "timestamp asc",
            Order::NewestFirst => "timestamp desc",
        };
        let call = async {
            self.client
                .list_log_entries()
                .set_resource_names([target.clone()])
                .set_filter(query.filter.render())
                .set_order_by(order)
                .set_page_size(query.page_size.clamp(1, MAX_PAGE_SIZE))
                .set_page_token(query.page_token.clone())
                .send()
                .await
                .map_err(|err| permission_hint(GcpError::from_gax(Service::Logging, METHOD, &target, &err)))
        };
        let page = self
            .metrics
            .observe(Service::Logging, METHOD, &target, call)
            .await?;
        Ok(EntriesPage {
            lines: page.entries.iter().map(line).collect(),
            next_page_token: page.next_page_token,
        })
    }
}

/// A permission error names the role that lists log entries.
fn permission_hint(err: GcpError) -> GcpError {
    if err.kind == ErrorKind::PermissionDenied {
        // Before the server's message, which may end with its per-request error id.
        let message = format!(
            "reading logs needs {VIEWER_ROLE} (permission logging.logEntries.list) on {}: {}",
            err.target, err.message
        );
        GcpError { message, ..err }
    } else {
        err
    }
}

/// The line an entry shows.
fn line(entry: &LogEntry) -> LogLine {
    let text = if let Some(text) = entry.text_payload() {
        text.clone()
    } else if let Some(json) = entry.json_payload() {
        match json.get("message").and_then(|m| m.as_str()) {
            Some(message) => message.to_string(),
            None => serde_json::to_string(json.as_ref()).unwrap_or_default(),
        }
    } else {
        String::new()
    };
    let severity = entry.severity.name().unwrap_or("DEFAULT").to_string();
    LogLine {
        timestamp: entry
            .timestamp
            .and_then(|t| DateTime::<Utc>::from_timestamp(t.seconds(), t.nanos().max(0) as u32)),
        severity,
        text: text.trim_end_matches('\n').to_string(),
        insert_id: entry.insert_id.clone(),
        host: host(entry),
    }
}

/// The host an entry names: the workload container's host label (docker's `gcplogs` driver puts
/// container labels under `jsonPayload.container.metadata`), else a TPU VM host's `worker_id`.
fn host(entry: &LogEntry) -> Option<String> {
    let label = entry
        .json_payload()
        .and_then(|j| j.get("container"))
        .and_then(|c| c.get("metadata"))
        .and_then(|m| m.get(sources::HOST_LABEL))
        .and_then(|h| h.as_str())
        .map(str::to_owned);
    label.or_else(|| {
        let resource = entry.resource.as_ref()?;
        (resource.r#type == "tpu_worker")
            .then(|| resource.labels.get("worker_id").cloned())
            .flatten()
    })
}
