//! Wire-format helpers shared by all services: query parsing with Google's conventions, timestamps
//! and durations, and schema-driven request validation / enum encoding.

pub mod query;
pub mod schema;
pub mod time;

pub use query::Query;
