//! A listed resource held until its owner's pass uses it, kept as its JSON compressed against a
//! dictionary of its type ([`crate::runtime::compressed`], as the watch cache keeps objects).
//!
//! Decoded by Google's client, a Dataproc batch is several KiB of maps and strings (labels,
//! Spark properties, endpoints, state history). When a burst of resources changes at once, the
//! watch holds one for every woken owner until that owner's pass takes it, and the passes run
//! 16 at a time: at N = 10,000 the backlog of decoded batches was the largest part of the
//! operator's heap at its peak (heaptrack, docs/benchmarks.md). Packed, each costs a
//! few hundred bytes; the pass that takes it pays one decode.

use tpu_operator_gcp::{aiplatform_v1::model::CustomJob, dataproc_v1::model::Batch, tpu_v2::model::Node};

use super::Listed;
use crate::runtime::compressed;

#[derive(Clone)]
pub enum Packed {
    Node(compressed::Packed<Node>),
    Batch(compressed::Packed<Batch>),
    Job(compressed::Packed<CustomJob>),
}

impl Packed {
    /// `None` when the resource cannot be encoded (an allocation failure in zstd): the caller
    /// then keeps nothing and the owner reads the resource by name, as for any resource the
    /// watch did not keep.
    pub fn of(listed: &Listed) -> Option<Packed> {
        match listed {
            Listed::Node(n) => compressed::Packed::new(n.as_ref()).ok().map(Packed::Node),
            Listed::Batch(b) => compressed::Packed::new(b.as_ref()).ok().map(Packed::Batch),
            Listed::Job(j) => compressed::Packed::new(j.as_ref()).ok().map(Packed::Job),
        }
    }

    /// The resource as it was listed; `None` if the bytes do not decode (the owner reads it).
    pub fn unpack(&self) -> Option<Listed> {
        match self {
            Packed::Node(p) => p.decode().ok().map(|n| Listed::Node(Box::new(n))),
            Packed::Batch(p) => p.decode().ok().map(|b| Listed::Batch(Box::new(b))),
            Packed::Job(p) => p.decode().ok().map(|j| Listed::Job(Box::new(j))),
        }
    }

    /// Bytes kept.
    #[cfg(test)]
    fn stored_len(&self) -> usize {
        match self {
            Packed::Node(p) => p.stored_len(),
            Packed::Batch(p) => p.stored_len(),
            Packed::Job(p) => p.stored_len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tpu_operator_gcp::dataproc_v1::model::{RuntimeConfig, batch::State};

    use super::*;

    fn batch(id: &str, state: State) -> Batch {
        let labels: HashMap<String, String> = (0..13)
            .map(|i| (format!("label-{i}"), format!("value-{id}-{i}")))
            .collect();
        let properties: HashMap<String, String> = (0..10)
            .map(|i| (format!("spark.property.{i}"), format!("{i}g")))
            .collect();
        Batch::new()
            .set_name(format!("projects/p/locations/us-central1/batches/{id}"))
            .set_uuid(format!("uuid-{id}"))
            .set_state(state)
            .set_state_message("running the driver")
            .set_labels(labels)
            .set_runtime_config(RuntimeConfig::new().set_properties(properties))
    }

    #[test]
    fn a_packed_resource_unpacks_to_what_was_listed_in_a_fraction_of_its_json() {
        let first = Listed::Batch(Box::new(batch("b-0", State::Pending)));
        let packed = Packed::of(&first).expect("packs");
        assert!(matches!(packed.unpack(), Some(Listed::Batch(b)) if *b == batch("b-0", State::Pending)));

        let other = batch("b-9999", State::Running);
        let json = serde_json::to_vec(&other).unwrap().len();
        let packed = Packed::of(&Listed::Batch(Box::new(other.clone()))).expect("packs");
        assert!(matches!(packed.unpack(), Some(Listed::Batch(b)) if *b == other));
        assert!(
            packed.stored_len() * 3 < json,
            "{} bytes kept for {json} bytes of JSON",
            packed.stored_len()
        );
    }

    #[test]
    fn each_collection_unpacks_as_its_own_type() {
        let node = Node::new()
            .set_name("projects/p/locations/z/nodes/n")
            .set_state(tpu_operator_gcp::tpu_v2::model::node::State::Ready);
        let job = CustomJob::new()
            .set_name("projects/p/locations/r/customJobs/1")
            .set_state(tpu_operator_gcp::aiplatform_v1::model::JobState::Running);
        let node_back = Packed::of(&Listed::Node(Box::new(node.clone())))
            .unwrap()
            .unpack();
        let job_back = Packed::of(&Listed::Job(Box::new(job.clone()))).unwrap().unpack();
        assert!(matches!(node_back, Some(Listed::Node(n)) if *n == node));
        assert!(matches!(job_back, Some(Listed::Job(j)) if *j == job));
    }
}
