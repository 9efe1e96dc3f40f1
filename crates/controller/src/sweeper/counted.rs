//! The sweep's part in the orphans counted against their namespace's quota and budget
//! ([`crate::governance::tenancy::orphans`]): every recorded orphan's zone is listed on every
//! sweep, whatever the places learned from objects (and their per-namespace bound); what the sweep
//! found and where it listed without an error update the book, which is written back to the
//! summary ConfigMap.

use std::collections::{BTreeSet, HashMap};

use tokio::time::Instant;

use super::{Place, Scope};
use crate::{governance::tenancy::usage::Holding, reconcile::context::Context};

/// Reads the book back (a new leader's first sweep). `false`: it could not be read, and this
/// sweep must not forget anything in it (writing it would drop what it holds).
pub(super) async fn load(ctx: &Context) -> bool {
    match ctx.tenancy.admissions.orphans.load(&ctx.client).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "could not read the orphans counted against quotas; not updating them this sweep");
            false
        }
    }
}

/// The zones of the recorded orphans.
pub(super) fn places(ctx: &Context) -> impl Iterator<Item = Place> {
    let zones = ctx.tenancy.admissions.orphans.places();
    zones.into_iter().map(|(p, z)| Place::new(Scope::Zone, p, z))
}

/// The sweep begun at `began` found `found` and listed `answered` without an error.
pub(super) async fn swept(
    ctx: &Context,
    loaded: bool,
    began: Instant,
    found: HashMap<String, Vec<Holding>>,
    answered: &BTreeSet<Place>,
) {
    if !loaded {
        return;
    }
    let zones: BTreeSet<(String, String)> = answered
        .iter()
        .filter(|p| p.scope == Scope::Zone)
        .map(|p| (p.project.clone(), p.location.clone()))
        .collect();
    let book = &ctx.tenancy.admissions.orphans;
    if book.swept(began, found, &zones)
        && let Err(e) = book.write(&ctx.client).await
    {
        tracing::warn!(error = %e, "could not write the orphans counted against quotas");
    }
}
