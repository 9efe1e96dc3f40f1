//! The clock `local` runs on: emulated time advanced by events (the default), or the wall clock.

use super::LocalArgs;

/// The runtime `local` runs on. By events (the default): one thread with tokio's clock paused,
/// so time moves only when every task waits on a timer and then jumps to the next one; the
/// emulated cloud's clock reads tokio's, and every cloud call holds it still until answered
/// ([`hold_time_during_calls`]). On the wall clock (`--wall-clock`, `--keep`): the usual runtime.
pub fn runtime(args: &LocalArgs) -> std::io::Result<tokio::runtime::Runtime> {
    if by_events(args) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread().enable_all().build()
    }
}

pub(super) fn by_events(args: &LocalArgs) -> bool {
    !args.wall_clock && !args.keep
}

/// Holds the paused clock while a cloud call is in flight. A request crossing the loopback socket
/// to gcp-emulator is waited on by no timer, so without a hold the runtime could find every task
/// idle and jump to the next timer mid-call. A blocking task keeps tokio from moving a paused
/// clock until it ends; this one ends when the hold is dropped with the call.
pub(super) fn hold_time_during_calls() -> tpu_operator_gcp::CallHold {
    tpu_operator_gcp::CallHold::new(|| {
        let (held, released) = std::sync::mpsc::channel::<()>();
        tokio::task::spawn_blocking(move || {
            let _ = released.recv();
        });
        Box::new(held)
    })
}
