//! A create and the process's create limiter ([`crate::runtime::capacity::limiter`]): asked for
//! a turn before the call (no turn, no call: the slice waits in line), and told when Google
//! refused the call for its rate quota, so the whole project's line slows down instead of each
//! slice retrying on its own.

use tpu_operator_api::tpu_slice::{Provisioner, TpuSlice};
use tpu_operator_gcp::GcpError;

use super::{Request, Started};
use crate::{
    kinds::tpu_slice::plan::{self, Outcome},
    reconcile::{handles::Io, kind::Kind},
    runtime::capacity::{Asker, Group, Line, Turn},
};

/// The quota a slice's create spends: the TPU API's create quota, or Compute Engine's
/// mutation quota, in the slice's project.
fn line(request: &Request<'_>) -> Line {
    let group = match request.names.provisioner {
        Provisioner::TpuApi => Group::TpuCreate,
        Provisioner::ComputeEngine => Group::ComputeMutate,
    };
    Line::new(group, &request.names.project)
}

/// `None`: create now (a turn is spent). Otherwise what is reported instead of the plan.
pub(super) fn ask(io: &Io<'_>, request: &Request<'_>) -> Option<Outcome> {
    let line = line(request);
    let asker = Asker::of(request.identity, <TpuSlice as Kind>::KIND);
    let now = io.clock.now();
    match io.capacity.turn(&line, asker, now) {
        Turn::Go => None,
        Turn::Wait(waiting) => Some(plan::paced(&line, &waiting, now)),
    }
}

/// A create Google refused for its rate quota pauses and slows the project's line.
pub(super) fn answered(io: &Io<'_>, request: &Request<'_>, result: &Result<Option<Started>, GcpError>) {
    if let Err(err) = result {
        io.capacity.answered(&line(request), err, io.clock.now());
    }
}
