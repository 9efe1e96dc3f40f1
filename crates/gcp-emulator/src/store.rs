//! The resource store every service keeps its resources in, and the chores they share: get by
//! full name (or the service's own 404), list the resources under a parent in name order, cut one
//! page of a list the way the service pages (`pageSize` / `maxResults`, `pageToken`), and remember
//! a `requestId` so a retried create or delete answers the operation the first call started.

use crate::errors::{ApiError, ApiResult};
use crate::wire::Query;
use crate::wire::query::paginate;
use std::collections::{BTreeMap, HashMap};
use std::ops::{Deref, DerefMut};

/// Resources keyed by full name (`projects/p/locations/l/nodes/n`, ...). Name order is the order
/// Google lists them in (services that sort otherwise sort the page source themselves), and a
/// parent's resources are one contiguous range of it.
///
/// It is a map underneath (reads and in-place updates go straight to it); what the services used
/// to repeat each in its own way sits on top.
#[derive(Clone, Debug)]
pub struct Store<T> {
    items: BTreeMap<String, T>,
}

impl<T> Default for Store<T> {
    fn default() -> Self {
        Store {
            items: BTreeMap::new(),
        }
    }
}

impl<T> Deref for Store<T> {
    type Target = BTreeMap<String, T>;
    fn deref(&self) -> &Self::Target {
        &self.items
    }
}

impl<T> DerefMut for Store<T> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.items
    }
}

impl<'a, T> IntoIterator for &'a Store<T> {
    type Item = (&'a String, &'a T);
    type IntoIter = std::collections::btree_map::Iter<'a, String, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl<T> Store<T> {
    /// The resource called `name`, or the error the service answers for a missing one.
    pub fn find(&self, name: &str, missing: impl FnOnce(&str) -> ApiError) -> ApiResult<&T> {
        self.items.get(name).ok_or_else(|| missing(name))
    }

    /// Like [`Store::find`], for an update in place.
    pub fn find_mut(&mut self, name: &str, missing: impl FnOnce(&str) -> ApiError) -> ApiResult<&mut T> {
        self.items.get_mut(name).ok_or_else(|| missing(name))
    }

    /// Every resource whose name starts with `prefix` (`{parent}/nodes/`), in name order.
    pub fn under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a String, &'a T)> + 'a {
        self.items
            .range(prefix.to_string()..)
            .take_while(move |(k, _)| k.starts_with(prefix))
    }
}

/// How a service pages its lists: the query parameter carrying the page size, the size when it is
/// absent or zero, and the largest size it serves.
#[derive(Clone, Copy, Debug)]
pub struct Paging {
    pub size_param: &'static str,
    pub default: usize,
    pub max: usize,
}

impl Paging {
    /// `pageSize`, as the TPU, Dataproc and Vertex APIs call it.
    pub const fn page_size(default: usize, max: usize) -> Paging {
        Paging {
            size_param: "pageSize",
            default,
            max,
        }
    }

    /// One page of `items` for the request's size and `pageToken`, with the next page's token.
    pub fn page<T: Clone>(&self, items: &[T], q: &Query) -> ApiResult<(Vec<T>, Option<String>)> {
        let size = q.page_size(self.size_param, self.default, self.max)?;
        paginate(items, size, q.get("pageToken"))
    }
}

/// `requestId` -> the operation the first call with it started. Keys carry the service and the
/// scope the id is unique in (`tpu|{parent}|{id}`, `compute|{scope}|{id}`, ...).
#[derive(Clone, Debug, Default)]
pub struct RequestIds {
    ops: HashMap<String, String>,
}

impl RequestIds {
    /// The operation an earlier call with this key started, if it is still stored in `ops`.
    pub fn replay<'a, T>(&self, key: &str, ops: &'a BTreeMap<String, T>) -> Option<&'a T> {
        self.ops.get(key).and_then(|op| ops.get(op))
    }

    /// Remembers that the call with this key started operation `op`.
    pub fn remember(&mut self, key: String, op: &str) {
        self.ops.insert(key, op.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_lists_one_parent_in_name_order() {
        let mut s: Store<u32> = Store::default();
        for (k, v) in [
            ("p/a/nodes/b", 2),
            ("p/a/nodes/a", 1),
            ("p/ab/nodes/c", 3),
            ("p/a/queued/d", 4),
        ] {
            s.insert(k.to_string(), v);
        }
        let got: Vec<u32> = s.under("p/a/nodes/").map(|(_, v)| *v).collect();
        assert_eq!(got, vec![1, 2]);
        assert!(
            s.find("p/a/nodes/z", |n| ApiError::not_found(n.to_string()))
                .is_err()
        );
        assert_eq!(
            *s.find("p/a/nodes/a", |n| ApiError::not_found(n.to_string()))
                .unwrap(),
            1
        );
    }

    #[test]
    fn paging_reads_the_services_parameter() {
        let items: Vec<u32> = (0..5).collect();
        let compute = Paging {
            size_param: "maxResults",
            default: 500,
            max: 500,
        };
        let (page, next) = compute.page(&items, &Query::parse(Some("maxResults=2"))).unwrap();
        assert_eq!((page, next.is_some()), (vec![0, 1], true));
        let (page, next) = Paging::page_size(3, 1000)
            .page(&items, &Query::parse(None))
            .unwrap();
        assert_eq!((page, next.is_some()), (vec![0, 1, 2], true));
    }

    #[test]
    fn request_ids_replay_the_stored_operation_only() {
        let mut ops: BTreeMap<String, &str> = BTreeMap::new();
        let mut ids = RequestIds::default();
        ids.remember("tpu|p|r1".into(), "op-1");
        assert_eq!(ids.replay("tpu|p|r1", &ops), None, "the operation was deleted");
        ops.insert("op-1".into(), "body");
        assert_eq!(ids.replay("tpu|p|r1", &ops), Some(&"body"));
        assert_eq!(ids.replay("tpu|p|r2", &ops), None);
    }
}
