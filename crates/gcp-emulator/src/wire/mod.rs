//! Wire-format helpers shared by all services: query parsing with Google's conventions, timestamps
//! and durations, label rules, and schema-driven request validation / enum encoding.

pub mod labels;
pub mod query;
pub mod schema;
pub mod time;

pub use query::Query;
