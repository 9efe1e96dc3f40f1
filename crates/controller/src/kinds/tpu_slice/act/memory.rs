//! A direct create and the process's stockout memory ([`crate::runtime::capacity`]): asked
//! before the call (a blocked place, or one another slice's create is asking, gets no call),
//! told the answer after it, and told when a node comes up.

use tpu_operator_gcp::{CreateFailure, GcpError, tpu_v2::model::node::State};

use super::{Request, Started};
use crate::{
    kinds::tpu_slice::plan::{self, Outcome},
    reconcile::handles::Io,
    runtime::capacity::Verdict,
};

/// `None`: create. Otherwise what is reported instead of the plan (the create withheld).
pub(super) fn ask(io: &Io<'_>, request: &Request<'_>) -> Option<Outcome> {
    let place = request.place?;
    let now = io.clock.now();
    match io.capacity.ask(place, &request.identity.uid, now) {
        Verdict::Go => None,
        held => Some(plan::withheld(place, &held, now)),
    }
}

/// Tells the memory what the create call answered: accepted, a stockout, or neither (the probe
/// is given up so another object may ask). Only a stockout blocks: an invalid request, a quota
/// or a rate limit is the asker's own and says nothing of the zone's stock.
pub(super) fn answered(io: &Io<'_>, request: &Request<'_>, result: &Result<Option<Started>, GcpError>) {
    let Some(place) = request.place else {
        return;
    };
    let (now, who) = (io.clock.now(), request.identity.uid.as_str());
    match result {
        // The call took it; the stock is known once the node comes up (see `node_seen`), as
        // a stockout may still come back in the operation.
        Ok(Some(_)) => io.capacity.accepted(place, who, now),
        Err(err) if err.create_failure() == CreateFailure::Stockout => io.capacity.stockout(place, who, now),
        Ok(None) | Err(_) => io.capacity.release(place, who),
    }
}

/// A create operation that failed: for want of capacity it blocks the place; for any other
/// reason it gives up the slice's probe.
pub(super) fn operation_failed(io: &Io<'_>, request: &Request<'_>, err: &GcpError) {
    let Some(place) = request.place else {
        return;
    };
    if err.create_failure() == CreateFailure::Stockout {
        io.capacity.stockout(place, &request.identity.uid, io.clock.now());
    } else {
        io.capacity.release(place, &request.identity.uid);
    }
}

/// The slice's node is up: if it was created after the place's last stockout, the place
/// grants again and every slice may ask it.
pub(super) fn node_seen(io: &Io<'_>, request: &Request<'_>) {
    let (Some(place), Some(node)) = (request.place, request.node) else {
        return;
    };
    if node.state != State::Ready {
        return;
    }
    let created = node
        .create_time
        .as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp(t.seconds(), u32::try_from(t.nanos()).unwrap_or(0)));
    if let Some(created) = created {
        io.capacity.granted(place, created);
    }
}
