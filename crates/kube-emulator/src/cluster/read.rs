//! get and list.

use super::{State, obj_ref, subject, to_served};
use crate::errors::{ApiError, ApiResult};
use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::ObjKey;
use serde_json::Value;

#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

#[derive(Clone, Debug)]
pub struct ListResult {
    pub items: Vec<Value>,
    pub resource_version: String,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

/// Continue tokens carry the list's resourceVersion and the last key returned.
fn encode_continue(rv: &str, key: &ObjKey) -> String {
    serde_json::json!({"rv": rv, "ns": key.0, "name": key.1}).to_string()
}

fn decode_continue(token: &str) -> ApiResult<(String, ObjKey)> {
    let v: Value = serde_json::from_str(token)
        .map_err(|_| ApiError::bad_request(format!("continue key is not valid: {token:?}")))?;
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    Ok((s("rv"), (s("ns"), s("name"))))
}

impl State {
    pub fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<Value> {
        self.store
            .get_ref(&obj_ref(rt, ns, name))
            .map(|o| to_served(rt, &o))
            .ok_or_else(|| ApiError::not_found(&subject(rt, name)))
    }

    /// Lists a resource (in `ns`, or everywhere when None), honouring selectors and paging.
    pub fn list(&self, rt: &ResourceType, ns: Option<&str>, opts: &ListOptions) -> ApiResult<ListResult> {
        let ns = if rt.namespaced { ns } else { None };
        let (rv, after) = match &opts.continue_token {
            Some(t) if !t.is_empty() => {
                let (rv, key) = decode_continue(t)?;
                (rv, Some(key))
            }
            _ => (self.store.resource_version().to_string(), None),
        };
        let mut matching = self.store.list(&rt.storage_key, ns).into_iter().filter(|o| {
            let key = (
                crate::meta::namespace(o).to_string(),
                crate::meta::name(o).to_string(),
            );
            after.as_ref().is_none_or(|a| key > *a)
        });
        let mut items = Vec::new();
        let mut last_key = None;
        let limit = opts.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        // Selectors see the stored form: labels and metadata are the same in every version.
        for obj in matching.by_ref() {
            if !opts.labels.matches(&obj) || !opts.fields.matches(&obj) {
                continue;
            }
            let served = to_served(rt, &obj);
            if items.len() == limit {
                // There is at least one more: hand out a continue token.
                let remaining = 1 + matching
                    .filter(|o| opts.labels.matches(o) && opts.fields.matches(o))
                    .count();
                return Ok(ListResult {
                    items,
                    continue_token: last_key.map(|k| encode_continue(&rv, &k)),
                    resource_version: rv,
                    remaining: Some(remaining),
                });
            }
            last_key = Some((
                crate::meta::namespace(&served).to_string(),
                crate::meta::name(&served).to_string(),
            ));
            items.push(served);
        }
        Ok(ListResult {
            items,
            resource_version: rv,
            continue_token: None,
            remaining: None,
        })
    }
}
