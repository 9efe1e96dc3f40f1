//! Reading every object of a kind, a page at a time.
//!
//! A tenant decides how large its objects are: up to etcd's 1.5 MiB each. A list is one response
//! body, decoded whole, so its memory is its page size times the largest object. Every list of
//! tenant objects the operator makes (the watch's initial list, a namespace's usage, the sweeper's
//! census) reads at most [`PAGE`] objects at once and keeps only what it needs of each.

use kube::{Api, api::ListParams};
use serde::de::DeserializeOwned;

/// Objects a list reads at once: 75 MiB of response body at the largest objects etcd admits,
/// against 750 MiB at kube-runtime's default page of 500. One more request per 50 objects, made
/// only when a watch starts or relists, a namespace's usage is refreshed (at most every 5 s, and
/// only for admissions), or a sweep runs.
pub const PAGE: u32 = 50;

/// Calls `f` on every object `api` lists, [`PAGE`] at a time; the pages form one consistent
/// snapshot (the API server's continue token).
pub async fn for_each<K>(api: &Api<K>, mut f: impl FnMut(K)) -> Result<(), kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut lp = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&lp).await?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        page.items.into_iter().for_each(&mut f);
        match next {
            Some(token) => lp = lp.continue_token(&token),
            None => return Ok(()),
        }
    }
}
