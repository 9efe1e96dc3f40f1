//! Compute Engine API v1, served under `/compute/v1/...`: the surfaces a TPU-slice backend on
//! Compute Engine uses — zonal `instances`, `regionInstanceTemplates`, regional
//! `resourcePolicies` (workload policies), zonal `instanceGroupManagers` with
//! `listManagedInstances`, `instanceGroupManagerResizeRequests`, and `zoneOperations` /
//! `regionOperations` get. Paths, verbs and query parameters as Google's Rust client
//! `google-cloud-compute-v1` sends them (its `src/transport.rs`); bodies validated against the
//! discovery document (`schemas/compute.json`, trimmed from `shared/gcp-api/compute.v1.json`).

pub mod errors;
pub mod igm;
pub mod instances;
pub mod interrupt;
pub mod machines;
pub mod maintenance;
pub mod operations;
pub mod policies;
pub mod resize;
pub mod templates;
pub mod workload;

use crate::api::{Reply, Req, no_route};
use crate::cloud::Cloud;
use crate::errors::ApiResult;
use crate::filter;
use crate::store::{Paging, Store};
use crate::wire::schema::{self, Svc};
use axum::http::Method;
use serde_json::{Value, json};

/// Prefix of every `selfLink` / URL field, as Compute Engine serves them.
pub const BASE: &str = "https://www.googleapis.com/compute/v1/";

/// Everything Compute Engine holds, keyed by relative resource path
/// (`projects/p/zones/z/instances/i`).
#[derive(Debug, Default)]
pub struct ComputeState {
    pub instances: Store<instances::InstanceRec>,
    pub templates: Store<Value>,
    pub policies: Store<Value>,
    pub igms: Store<igm::IgmRec>,
    pub resize: Store<resize::ResizeRec>,
    pub ops: Store<Value>,
    /// Counter for internal IPs.
    pub next_ip: u64,
}

/// A zone or a region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loc {
    Zone(String),
    Region(String),
}

impl Loc {
    /// `projects/p/zones/z` or `projects/p/regions/r`.
    pub fn scope(&self, project: &str) -> String {
        match self {
            Loc::Zone(z) => format!("projects/{project}/zones/{z}"),
            Loc::Region(r) => format!("projects/{project}/regions/{r}"),
        }
    }
}

/// The region of a zone (`us-central2-b` -> `us-central2`).
pub fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-').map(|(r, _)| r).unwrap_or(zone)
}

/// A URL (full, `/compute/v1/...` or partial) as a path relative to `compute/v1/`.
pub fn rel(url: &str) -> &str {
    for p in [BASE, "https://compute.googleapis.com/compute/v1/", "/compute/v1/"] {
        if let Some(r) = url.strip_prefix(p) {
            return r;
        }
    }
    url
}

/// A deterministic 19-digit numeric id (Compute ids are uint64 decimal strings).
pub fn numeric_id(w: &mut Cloud) -> String {
    let s = w.next_seq();
    let n = s.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 9_000_000_000_000_000_000 + 1_000_000_000_000_000_000;
    n.to_string()
}

/// Four lowercase alphanumerics, as MIGs append to `baseInstanceName`.
pub fn suffix(w: &mut Cloud) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut n = w.next_seq().wrapping_mul(0xD1B5_4A32_D192_ED03).rotate_left(23);
    (0..4)
        .map(|_| {
            let c = CHARS[(n % 36) as usize] as char;
            n /= 36;
            c
        })
        .collect()
}

/// RFC 1035 names, as Compute requires (`[a-z]([-a-z0-9]{0,61}[a-z0-9])?`).
pub fn check_name(name: Option<&str>, field: &str) -> ApiResult<String> {
    let n = name.ok_or_else(|| errors::required(field))?;
    let b = n.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-';
    if ok {
        Ok(n.to_string())
    } else {
        Err(errors::invalid_field(
            field,
            n,
            "Must be a match of regex '[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'",
        ))
    }
}

/// Validates a request body against the discovery schema (unknown fields -> 400 naming them);
/// values at their default (`automaticRestart: false`) are kept as sent.
pub fn validate(schema_name: &str, req: &Req) -> ApiResult<Value> {
    schema::validate_keeping_defaults(Svc::Compute, schema_name, &req.json()?, "resource")
}

/// A parsed Compute request: project, zone or region, and the path after it.
#[derive(Debug)]
pub struct Route {
    pub project: String,
    pub loc: Loc,
    pub rest: Vec<String>,
}

pub fn route(req: &Req) -> Option<(Route, &'static str)> {
    let s: Vec<&str> = req.segs.iter().map(String::as_str).collect();
    let (project, loc, rest) = match s.as_slice() {
        ["projects", p, "zones", z, rest @ ..] => (p, Loc::Zone(z.to_string()), rest),
        ["projects", p, "regions", r, rest @ ..] => (p, Loc::Region(r.to_string()), rest),
        _ => return None,
    };
    let m = &req.method;
    let zonal = matches!(loc, Loc::Zone(_));
    let id = match (zonal, rest, m.clone()) {
        (true, ["instances"], Method::GET) => "instances.list",
        (true, ["instances"], Method::POST) => "instances.insert",
        (true, ["instances", _], Method::GET) => "instances.get",
        (true, ["instances", _], Method::DELETE) => "instances.delete",
        (true, ["instances", _, "setMetadata"], Method::POST) => "instances.setMetadata",
        (true, ["instances", _, "performMaintenance"], Method::POST) => "instances.performMaintenance",
        (true, ["instances", _, "simulateMaintenanceEvent"], Method::POST) => {
            "instances.simulateMaintenanceEvent"
        }
        (true, ["instanceGroupManagers"], Method::GET) => "instanceGroupManagers.list",
        (true, ["instanceGroupManagers"], Method::POST) => "instanceGroupManagers.insert",
        (true, ["instanceGroupManagers", _], Method::GET) => "instanceGroupManagers.get",
        (true, ["instanceGroupManagers", _], Method::DELETE) => "instanceGroupManagers.delete",
        (true, ["instanceGroupManagers", _, "listManagedInstances"], Method::POST) => {
            "instanceGroupManagers.listManagedInstances"
        }
        (true, ["instanceGroupManagers", _, "resizeRequests"], Method::GET) => {
            "instanceGroupManagerResizeRequests.list"
        }
        (true, ["instanceGroupManagers", _, "resizeRequests"], Method::POST) => {
            "instanceGroupManagerResizeRequests.insert"
        }
        (true, ["instanceGroupManagers", _, "resizeRequests", _], Method::GET) => {
            "instanceGroupManagerResizeRequests.get"
        }
        (true, ["instanceGroupManagers", _, "resizeRequests", _], Method::DELETE) => {
            "instanceGroupManagerResizeRequests.delete"
        }
        (true, ["instanceGroupManagers", _, "resizeRequests", _, "cancel"], Method::POST) => {
            "instanceGroupManagerResizeRequests.cancel"
        }
        (true, ["operations", _], Method::GET) => "zoneOperations.get",
        (false, ["instanceTemplates"], Method::GET) => "regionInstanceTemplates.list",
        (false, ["instanceTemplates"], Method::POST) => "regionInstanceTemplates.insert",
        (false, ["instanceTemplates", _], Method::GET) => "regionInstanceTemplates.get",
        (false, ["instanceTemplates", _], Method::DELETE) => "regionInstanceTemplates.delete",
        (false, ["resourcePolicies"], Method::GET) => "resourcePolicies.list",
        (false, ["resourcePolicies"], Method::POST) => "resourcePolicies.insert",
        (false, ["resourcePolicies", _], Method::GET) => "resourcePolicies.get",
        (false, ["resourcePolicies", _], Method::DELETE) => "resourcePolicies.delete",
        (false, ["operations", _], Method::GET) => "regionOperations.get",
        _ => return None,
    };
    let r = Route {
        project: project.to_string(),
        loc,
        rest: rest.iter().map(|x| x.to_string()).collect(),
    };
    Some((r, id))
}

pub fn handle(w: &mut Cloud, ce: &mut ComputeState, req: &Req, r: Route, method: &str) -> ApiResult<Reply> {
    w.project_number(&r.project);
    let scope = r.loc.scope(&r.project);
    let key = match r.rest.as_slice() {
        [coll, id, ..] => format!("{scope}/{coll}/{id}"),
        _ => String::new(),
    };
    let json = Reply::json;
    match method {
        "instances.insert" => instances::insert(w, ce, &r.project, &scope, req).map(json),
        "instances.get" => instances::get(ce, &key).map(json),
        "instances.delete" => instances::delete(w, ce, &r.project, &scope, &key, req).map(json),
        "instances.list" => instances::list(ce, &scope, req).map(json),
        "instances.setMetadata" | "instances.performMaintenance" | "instances.simulateMaintenanceEvent" => {
            maintenance::call(method, w, ce, (&r.project, &scope, &key), req).map(json)
        }
        "regionInstanceTemplates.insert" => templates::insert(w, ce, &r.project, &scope, req).map(json),
        "regionInstanceTemplates.get" => templates::get(ce, &key).map(json),
        "regionInstanceTemplates.delete" => templates::delete(w, ce, &r.project, &scope, &key, req).map(json),
        "regionInstanceTemplates.list" => templates::list(ce, &scope, req).map(json),
        "resourcePolicies.insert" => policies::insert(w, ce, &r.project, &scope, req).map(json),
        "resourcePolicies.get" => policies::get(ce, &key).map(json),
        "resourcePolicies.delete" => policies::delete(w, ce, &r.project, &scope, &key, req).map(json),
        "resourcePolicies.list" => policies::list(ce, &scope, req).map(json),
        "instanceGroupManagers.insert" => igm::insert(w, ce, &r.project, &scope, req).map(json),
        "instanceGroupManagers.get" => igm::get(ce, &key).map(json),
        "instanceGroupManagers.delete" => igm::delete(w, ce, &r.project, &scope, &key, req).map(json),
        "instanceGroupManagers.list" => igm::list(ce, &scope, req).map(json),
        "instanceGroupManagers.listManagedInstances" => igm::list_managed(ce, &key).map(json),
        "instanceGroupManagerResizeRequests.insert" => {
            resize::insert(w, ce, &r.project, &scope, &key, req).map(json)
        }
        "instanceGroupManagerResizeRequests.list" => resize::list(ce, &key, req).map(json),
        m if m.starts_with("instanceGroupManagerResizeRequests.") => {
            let rr = format!(
                "{key}/resizeRequests/{}",
                r.rest.get(3).map(String::as_str).unwrap_or("")
            );
            match m {
                "instanceGroupManagerResizeRequests.get" => resize::get(ce, &rr).map(json),
                "instanceGroupManagerResizeRequests.cancel" => {
                    resize::cancel(w, ce, &r.project, &scope, &rr, req).map(json)
                }
                _ => resize::delete(w, ce, &r.project, &scope, &rr, req).map(json),
            }
        }
        "zoneOperations.get" | "regionOperations.get" => operations::get(ce, &key).map(json),
        _ => Err(no_route(&req.method, &key)),
    }
}

/// Fires a Compute timer; the key says what (`i|`, `ie|`, `op|`, `rr|`, `iw|`, `im|` + resource
/// key).
pub fn fire(w: &mut Cloud, ce: &mut ComputeState, seq: u64, key: &str) {
    let Some((what, k)) = key.split_once('|') else {
        return;
    };
    match what {
        "i" => instances::fire(w, ce, seq, k),
        "ie" => instances::fire_run_end(w, ce, seq, k),
        "op" => operations::done(w, ce, k),
        "rr" => resize::fire_accept(w, ce, seq, k),
        "iw" => workload::fire(w, ce, seq, k),
        "im" => maintenance::fire(w, ce, seq, k),
        _ => {}
    }
}

/// Capacity may have changed (a fault lifted, an instance gone): waiting MIGs and resize
/// requests try again, in creation order.
pub fn recheck(w: &mut Cloud, ce: &mut ComputeState) {
    let igms: Vec<String> = ce.igms.keys().cloned().collect();
    for k in igms {
        igm::reconcile(w, ce, &k);
    }
    let mut rrs: Vec<(String, String)> = ce
        .resize
        .iter()
        .map(|(k, r)| {
            (
                r.body["creationTimestamp"].as_str().unwrap_or("").to_string(),
                k.clone(),
            )
        })
        .collect();
    rrs.sort();
    for (_, k) in rrs {
        resize::try_grant(w, ce, &k);
    }
}

/// Keeps the items of `filter` (AIP-160 subset, `crate::filter`): `labels.KEY = "VALUE"`,
/// `labels.KEY:*`, `name = "x"`, `status = RUNNING`, joined by AND / whitespace (and OR, NOT,
/// parentheses, which Compute's own filter syntax also has).
fn filtered(items: Vec<Value>, req: &Req, fields: &[&str]) -> ApiResult<Vec<Value>> {
    let Some(f) = req.query.get("filter") else {
        return Ok(items);
    };
    let expr = filter::parse(f, fields)?;
    Ok(items
        .into_iter()
        .filter(|it| {
            filter::eval(&expr, &|field| {
                let v = match field.strip_prefix("labels.") {
                    Some(k) => &it["labels"][k],
                    None => &it[field],
                };
                match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Null => None,
                    other => Some(other.to_string()),
                }
            })
        })
        .collect())
}

/// Compute lists page by `maxResults` (default and max 500).
const PAGING: Paging = Paging {
    size_param: "maxResults",
    default: 500,
    max: 500,
};

/// A Compute `list` of the collection at `path` (`{scope}/instances`, ...): the items stored
/// under it as `view` shows them, kept by `filter` on `fields`, one page of
/// `{kind, id, items, selfLink, nextPageToken}`.
pub fn list_collection<T>(
    store: &Store<T>,
    path: &str,
    kind: &str,
    fields: &[&str],
    req: &Req,
    view: impl Fn(&String, &T) -> Option<Value>,
) -> ApiResult<Value> {
    let items = store
        .under(&format!("{path}/"))
        .filter_map(|(k, v)| view(k, v))
        .collect();
    let items = filtered(items, req, fields)?;
    let (page, next) = PAGING.page(&items, &req.query)?;
    let mut out = json!({"kind": kind, "id": path, "selfLink": format!("{BASE}{path}")});
    if !page.is_empty() {
        out["items"] = Value::Array(page);
    }
    if let Some(t) = next {
        out["nextPageToken"] = json!(t);
    }
    Ok(out)
}

/// Admin lists: `/emulator/v1/{path}` -> what.
pub const ADMIN_LISTS: &[(&str, &str)] = &[
    ("instances", "instance"),
    ("instanceTemplates", "template"),
    ("resourcePolicies", "policy"),
    ("instanceGroupManagers", "igm"),
    ("resizeRequests", "resize"),
    ("computeOperations", "op"),
];

/// Full bodies of one kind (see [`ADMIN_LISTS`]), as `get` serves them.
pub fn bodies(ce: &ComputeState, kind: &str) -> Vec<Value> {
    match kind {
        "instance" => ce.instances.values().map(|r| r.body.clone()).collect(),
        "template" => ce.templates.values().cloned().collect(),
        "policy" => ce.policies.values().cloned().collect(),
        "igm" => ce.igms.keys().filter_map(|k| igm::view(ce, k)).collect(),
        "resize" => ce.resize.values().map(|r| r.body.clone()).collect(),
        "op" => ce.ops.values().cloned().collect(),
        _ => Vec::new(),
    }
}

/// `(kind, name, state)` for `list_resources`.
pub fn summaries(ce: &ComputeState) -> Vec<(&'static str, String, String)> {
    let s = |v: &Value, f: &str| v[f].as_str().unwrap_or("-").to_string();
    let mut out = Vec::new();
    for (k, r) in &ce.instances {
        out.push(("compute.instance", k.clone(), r.status().to_string()));
    }
    for (k, t) in &ce.templates {
        out.push(("compute.instanceTemplate", k.clone(), s(t, "status")));
    }
    for (k, p) in &ce.policies {
        out.push(("compute.resourcePolicy", k.clone(), s(p, "status")));
    }
    for (k, g) in &ce.igms {
        let state = if g.deleting.is_some() {
            "DELETING"
        } else {
            "ACTIVE"
        };
        out.push(("compute.instanceGroupManager", k.clone(), state.to_string()));
    }
    for (k, r) in &ce.resize {
        out.push(("compute.resizeRequest", k.clone(), s(&r.body, "state")));
    }
    for (k, o) in &ce.ops {
        out.push(("compute.operation", k.clone(), s(o, "status")));
    }
    out
}
