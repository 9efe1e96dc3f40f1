//! Call log: every API request the emulator answered (service, method, path, status, emulated
//! time), plus per-method counters that survive log truncation. Tests and benches count API calls
//! with it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// Keep at most this many records (counters are kept for every call).
const MAX_RECORDS: usize = 100_000;

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CallRecord {
    /// `tpu`, `dataproc`, `vertex`, `storage`, `compute`, `logging` or `iamcredentials`.
    pub service: String,
    /// Discovery-style method id, e.g. `nodes.create`, `operations.get`, `objects.insert`.
    pub method: String,
    /// HTTP verb.
    pub http_method: String,
    /// Path as received (including the service prefix), without the query.
    pub path: String,
    pub query: String,
    /// HTTP status answered.
    pub status: u16,
    /// Emulated time of the call.
    pub time: DateTime<Utc>,
    /// Who the call acted as: the service account its bearer token was minted for, else the
    /// default principal (see [`crate::iam`]); empty when the caller was not authenticated
    /// (an expired token) or the path routes nowhere.
    #[serde(default)]
    pub principal: String,
}

#[derive(Debug, Default)]
pub struct CallLog {
    records: VecDeque<CallRecord>,
    counts: BTreeMap<String, u64>,
}

impl CallLog {
    pub fn record(&mut self, r: CallRecord) {
        *self
            .counts
            .entry(format!("{}.{}", r.service, r.method))
            .or_default() += 1;
        if self.records.len() == MAX_RECORDS {
            self.records.pop_front();
        }
        self.records.push_back(r);
    }

    pub fn records(&self) -> Vec<CallRecord> {
        self.records.iter().cloned().collect()
    }

    /// Counts keyed `service.method`, e.g. `tpu.nodes.create`.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.counts.clone()
    }

    pub fn clear(&mut self) {
        self.records.clear();
        self.counts.clear();
    }
}
