//! `gcp-emulator`: a local, stateful emulator of the Cloud TPU v2, Dataproc v1 (Serverless
//! batches), Vertex AI v1 (custom jobs), Compute Engine v1 (TPU VMs, MIGs, resize requests) and
//! Cloud Storage JSON REST APIs, faithful to the wire
//! format Google's own clients expect. See the crate README for the HTTP surface, the admin API,
//! default durations, conventions and known fidelity gaps.

pub mod admin;
pub mod api;
pub mod blobs;
pub mod calls;
pub mod capacity;
pub mod capacity_admin;
pub mod clock;
pub mod cloud;
pub mod compute;
pub mod config;
pub mod dataproc;
pub mod emulator;
pub mod errors;
pub mod faults;
pub mod filter;
pub mod iam;
pub mod logging;
pub mod lro;
pub mod outputs;
pub mod server;
pub mod storage;
pub mod store;
pub mod tpu;
pub mod training;
pub mod vertex;
pub mod wire;
pub mod world;

pub use admin::{BILLABLE_KINDS, ResourceSummary};
pub use calls::CallRecord;
pub use capacity::{
    CapacityKind,
    quotas::{QuotaGroup, QuotaView, RateQuota},
    stock::{Refill, StockEntry, StockSpec, StockStep},
};
pub use clock::Clock;
pub use config::{Config, Durations};
pub use emulator::{Emulator, EmulatorBuilder, ResourceCounts, StoredObject};
pub use errors::{ApiError, Code};
pub use faults::{CapacityCause, ErrorShape, Fault};
pub use iam::Iam;
pub use outputs::{CHECKPOINT_REQUEST_KEY, DONE_URI_KEY, OUTPUT_PROPERTY};
pub use training::{Cause, CheckpointRequest, WorkloadInterruption};
