//! Reading every object of a kind, a page at a time.
//!
//! A tenant decides how large its objects are: up to etcd's 1.5 MiB each. A list is one response
//! body, decoded whole, so its memory is its page size times the largest object. Every list of
//! tenant objects the operator makes (the watch's initial list, a namespace's usage, the sweeper's
//! census) reads at most [`PAGE`] objects at once and keeps only what it needs of each.

use kube::{Api, api::ListParams};
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;

/// Objects a list reads at once: 30 MiB of response body at the largest objects etcd admits (and
/// as much again decoded), against 750 MiB at kube-runtime's default page of 500. One more request
/// per 20 objects, made only when a watch starts or relists, a namespace's usage is refreshed (at
/// most every 5 s, and only for admissions and the policy status), or a sweep runs.
pub const PAGE: u32 = 20;

/// Pages of [`for_each`] held at once, process-wide: namespaces' usage refreshes and the sweeper's
/// census run side by side, and each page may be [`PAGE`] of the largest objects, so their sum is
/// bounded here rather than by how many namespaces list at the same moment.
const PAGES_AT_ONCE: usize = 2;

static PAGES: Semaphore = Semaphore::const_new(PAGES_AT_ONCE);

/// Calls `f` on every object `api` lists, [`PAGE`] at a time; the pages form one consistent
/// snapshot (the API server's continue token). A page is read and handed to `f` holding one of
/// [`PAGES_AT_ONCE`] permits.
pub async fn for_each<K>(api: &Api<K>, mut f: impl FnMut(K)) -> Result<(), kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut lp = ListParams::default().limit(PAGE);
    loop {
        let next = {
            let _page = PAGES.acquire().await.expect("the page semaphore is never closed");
            let page = api.list(&lp).await?;
            let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
            page.items.into_iter().for_each(&mut f);
            next
        };
        match next {
            Some(token) => lp = lp.continue_token(&token),
            None => return Ok(()),
        }
    }
}
