//! Reading the cloud side: the current attempt's batch (by its deterministic name), the declared
//! output once a batch succeeded, the declared inputs before the first submit, and, for cleanup,
//! every batch carrying this object's UID label.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    naming::{self, ObjectIdentity},
    preprocess_batch::{PreprocessBatchSpec, PreprocessBatchStatus},
};
use tpu_operator_gcp::{
    ErrorKind, GcpError,
    dataproc_v1::model::{Batch, batch::State},
    wkt,
};

use crate::reconcile::handles::Io;
use crate::runtime::error::{ReconcileError, Result};

/// Where this object's batches live and what they are called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub identity: ObjectIdentity,
    /// `projects/<p>/locations/<region>`.
    pub parent: String,
}

impl Target {
    /// Full name of the batch of `attempt` (1-based).
    pub fn batch_name(&self, attempt: u32) -> String {
        format!("{}/batches/{}", self.parent, self.batch_id(attempt))
    }

    pub fn batch_id(&self, attempt: u32) -> String {
        naming::dataproc_batch_id(&self.identity, attempt)
    }

    /// Same for every retry of the same attempt's create, different per attempt.
    pub fn request_id(&self, attempt: u32) -> String {
        naming::request_id(&self.identity, "batch", attempt)
    }
}

/// One `stateHistory` entry (or the current state) of a batch.
#[derive(Clone, Debug, PartialEq)]
pub struct StateEntry {
    pub state: State,
    pub since: Option<DateTime<Utc>>,
}

/// The parts of a Dataproc batch the controller decides on and reports.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedBatch {
    pub name: String,
    pub uuid: String,
    pub state: State,
    pub state_message: String,
    /// When the batch entered `state` (for a terminal state: when the attempt ended).
    pub state_time: Option<DateTime<Utc>>,
    pub create_time: Option<DateTime<Utc>>,
    /// The batch's create operation; cancelling it cancels the batch.
    pub operation: String,
    /// `runtimeInfo.outputUri` (driver output).
    pub driver_output_uri: Option<String>,
    /// `runtimeInfo.endpoints`, e.g. `Spark History Server` → its URL.
    pub endpoints: BTreeMap<String, String>,
    /// What the batch used, for the cost estimate.
    pub usage: Usage,
    /// Previous states, oldest first, then the current one.
    pub history: Vec<StateEntry>,
}

impl ObservedBatch {
    pub fn from_batch(b: &Batch) -> Self {
        let mut history: Vec<StateEntry> = b
            .state_history
            .iter()
            .map(|h| StateEntry {
                state: h.state.clone(),
                since: h.state_start_time.as_ref().and_then(to_chrono),
            })
            .collect();
        history.push(StateEntry {
            state: b.state.clone(),
            since: b.state_time.as_ref().and_then(to_chrono),
        });
        Self {
            name: b.name.clone(),
            uuid: b.uuid.clone(),
            state: b.state.clone(),
            state_message: b.state_message.clone(),
            state_time: b.state_time.as_ref().and_then(to_chrono),
            create_time: b.create_time.as_ref().and_then(to_chrono),
            operation: b.operation.clone(),
            driver_output_uri: b
                .runtime_info
                .as_ref()
                .map(|r| r.output_uri.clone())
                .filter(|u| !u.is_empty()),
            endpoints: b
                .runtime_info
                .as_ref()
                .map(|r| r.endpoints.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default(),
            usage: Usage::of(b),
            history,
        }
    }
}

/// Resource usage Dataproc reports: the total once the batch is terminal
/// (`runtimeInfo.approximateUsage`), the current rate while it runs (`runtimeInfo.currentUsage`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    pub dcu_seconds: f64,
    pub shuffle_gb_seconds: f64,
    /// DCUs in use right now (0 when not reported or not running).
    pub current_dcu: f64,
}

impl Usage {
    fn of(b: &Batch) -> Self {
        let Some(info) = &b.runtime_info else {
            return Self::default();
        };
        let total = info.approximate_usage.as_ref();
        Self {
            dcu_seconds: total.map_or(0.0, |u| u.milli_dcu_seconds as f64 / 1000.0),
            shuffle_gb_seconds: total.map_or(0.0, |u| u.shuffle_storage_gb_seconds as f64),
            current_dcu: info
                .current_usage
                .as_ref()
                .map_or(0.0, |u| (u.milli_dcu + u.milli_dcu_premium) as f64 / 1000.0),
        }
    }
}

fn to_chrono(t: &wkt::Timestamp) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.seconds(), u32::try_from(t.nanos()).unwrap_or(0))
}

/// The current attempt's batch.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchLookup {
    /// Not read: no attempt yet, or the status already records how the current attempt ended.
    NotRead,
    /// The status names a batch that does not exist (deleted behind the operator's back).
    Missing,
    Found(Box<ObservedBatch>),
}

/// The declared output of a succeeded batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputCheck {
    /// No `outputUri` declared: success needs no check.
    NotDeclared,
    /// Not checked (the batch has not succeeded).
    NotChecked,
    Present,
    /// Nothing under the prefix (or its bucket does not exist); the text says which.
    Missing(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub batch: BatchLookup,
    pub output: OutputCheck,
    /// Declared inputs found missing before the first submit.
    pub missing_inputs: Vec<String>,
    /// A deletion pass's view of what is left (`None` on an apply pass).
    pub remaining: Option<Remaining>,
}

/// What a deletion pass knows is left of the object's batches.
#[derive(Clone, Debug, PartialEq)]
pub enum Remaining {
    /// Status names the one batch there can be (see [`PreprocessBatchStatus::only_batch`]):
    /// not read, deleted by name.
    Only(String),
    /// Every batch carrying the object's UID label.
    Listed(Vec<ObservedBatch>),
}

impl Observed {
    /// Nothing read yet.
    fn unread() -> Self {
        Self {
            batch: BatchLookup::NotRead,
            output: OutputCheck::NotChecked,
            missing_inputs: Vec::new(),
            remaining: None,
        }
    }
}

/// Reads what `plan` needs for the apply path: at most one batch get, one output listing (only
/// once a batch succeeded) or one listing per declared input (only before the first submit).
pub async fn observe(
    io: &Io<'_>,
    target: &Target,
    spec: &PreprocessBatchSpec,
    status: &PreprocessBatchStatus,
) -> Result<Observed> {
    let mut observed = Observed::unread();
    // The status already says how the current attempt ended: the cloud need not be read.
    if status.phase.attempt_settled() {
        return Ok(observed);
    }
    let attempt = u32::try_from(status.attempts).unwrap_or(0);
    if attempt == 0 {
        for input in &spec.batch.inputs {
            if !exists(io, target, input).await? {
                observed.missing_inputs.push(input.clone());
            }
        }
        return Ok(observed);
    }
    let name = target.batch_name(attempt);
    // A batch the cloud watch just listed in a new state needs no second read.
    let got = match io.take_listed::<Batch>(&name) {
        Some(listed) => Ok(listed),
        None => io.gcp.dataproc.get_batch(&name).await,
    };
    observed.batch = match got {
        Ok(b) => BatchLookup::Found(Box::new(ObservedBatch::from_batch(&b))),
        Err(err) if err.kind == ErrorKind::NotFound => BatchLookup::Missing,
        Err(err) => return Err(ReconcileError::gcp("get Dataproc batch")(err)),
    };
    if let BatchLookup::Found(b) = &observed.batch
        && b.state == State::Succeeded
    {
        observed.output = match &spec.batch.output_uri {
            None => OutputCheck::NotDeclared,
            Some(uri) if exists(io, target, uri).await? => OutputCheck::Present,
            Some(uri) => OutputCheck::Missing(format!("no objects under {uri}")),
        };
    }
    Ok(observed)
}

/// Whether anything exists under a `gs://` prefix, read as the namespace's Google identity. A
/// missing bucket counts as "nothing there".
async fn exists(io: &Io<'_>, target: &Target, uri: &str) -> Result<bool> {
    let storage = io.storage_for(&target.identity.namespace);
    match storage.prefix_exists(uri).await {
        Ok(found) => Ok(found),
        Err(err) if err.kind == ErrorKind::NotFound => Ok(false),
        Err(err) => Err(ReconcileError::gcp("check Cloud Storage prefix")(err)),
    }
}

/// Reads what a deletion pass needs: nothing when the status names the object's only batch
/// (its attempt finished, and status named the batch after seeing it finish, so no other batch
/// of the object can exist), else one listing by UID label.
pub async fn observe_deletion(
    io: &Io<'_>,
    target: &Target,
    status: Option<&PreprocessBatchStatus>,
) -> Result<Observed> {
    let remaining = match status.and_then(PreprocessBatchStatus::only_batch) {
        Some(batch) => Remaining::Only(batch.to_string()),
        None => Remaining::Listed(observe_cleanup(io, target).await?),
    };
    Ok(Observed {
        remaining: Some(remaining),
        ..Observed::unread()
    })
}

/// Every batch of this object (all attempts, including one created just before a crash and never
/// recorded in status), found by the UID label the operator puts on each.
pub async fn observe_cleanup(io: &Io<'_>, target: &Target) -> Result<Vec<ObservedBatch>> {
    let filter = format!(
        "labels.{} = \"{}\"",
        naming::labels::UID,
        naming::sanitize_label_value(&target.identity.uid)
    );
    let batches = io
        .gcp
        .dataproc
        .list_batches(&target.parent, &filter)
        .await
        .or_else(not_found_is_empty)
        .map_err(ReconcileError::gcp("list Dataproc batches"))?;
    Ok(batches.iter().map(ObservedBatch::from_batch).collect())
}

fn not_found_is_empty(err: GcpError) -> std::result::Result<Vec<Batch>, GcpError> {
    if err.kind == ErrorKind::NotFound {
        Ok(Vec::new())
    } else {
        Err(err)
    }
}
