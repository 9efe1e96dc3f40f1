//! Admin API for scarcity (top layer, beside `admin.rs`): `GET|POST|DELETE stock` and
//! `GET|POST|DELETE quotas` (see [`crate::capacity`]). Shared with the in-process handle.

use crate::capacity::{quotas::RateQuota, stock::StockSpec};
use crate::errors::{ApiError, ApiResult};
use crate::world::{Shared, World};
use axum::http::Method;
use serde_json::{Value, json};

/// Sets a stock entry from now; waiting queued resources, MIGs and resize requests look again at
/// once (more stock may let them through).
pub fn set_stock(w: &mut World, spec: StockSpec) {
    let now = w.cloud.now;
    w.cloud.capacity.stock.set(spec, now);
    recheck(w);
}

/// Forgets every stock entry (unlimited capacity again).
pub fn clear_stock(w: &mut World) {
    w.cloud.capacity.stock.clear();
    recheck(w);
}

fn recheck(w: &mut World) {
    crate::tpu::queued::recheck_waiting(&mut w.cloud, &mut w.tpu);
    crate::compute::recheck(&mut w.cloud, &mut w.compute);
}

/// The stock entries, each with the chips it can grant now.
pub fn stock_view(w: &World) -> Value {
    let now = w.cloud.now;
    let entries: Vec<Value> = w
        .cloud
        .capacity
        .stock
        .entries()
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e).unwrap_or_default();
            v["capNow"] = json!(e.cap_at(now));
            v
        })
        .collect();
    json!({"stock": entries})
}

/// `stock` and `quotas` (`rest` is the path under `/emulator/v1/`); `None`: not one of these.
pub fn handle(shared: &Shared, method: &Method, rest: &str, body: &[u8]) -> Option<ApiResult<Value>> {
    let parse = |body: &[u8]| -> ApiResult<Value> {
        let b: &[u8] = if body.is_empty() { b"{}" } else { body };
        serde_json::from_slice(b).map_err(|e| ApiError::invalid(format!("invalid admin request body: {e}")))
    };
    Some(match (method.clone(), rest) {
        (Method::GET, "stock") => Ok(stock_view(&shared.world())),
        (Method::POST, "stock") => parse(body).and_then(|v| {
            let spec: StockSpec =
                serde_json::from_value(v).map_err(|e| ApiError::invalid(format!("stock: {e}")))?;
            set_stock(&mut shared.world(), spec);
            Ok(json!({}))
        }),
        (Method::DELETE, "stock") => {
            clear_stock(&mut shared.world());
            Ok(json!({}))
        }
        (Method::GET, "quotas") => {
            let w = shared.world();
            Ok(json!({"quotas": w.cloud.capacity.quotas.view(w.cloud.now)}))
        }
        (Method::POST, "quotas") => parse(body).and_then(|v| {
            let q: RateQuota =
                serde_json::from_value(v).map_err(|e| ApiError::invalid(format!("quotas: {e}")))?;
            shared.world().cloud.capacity.quotas.set(q);
            Ok(json!({}))
        }),
        (Method::DELETE, "quotas") => {
            shared.world().cloud.capacity.quotas.clear();
            Ok(json!({}))
        }
        _ => return None,
    })
}

/// The in-process handle's side of the same operations.
impl crate::Emulator {
    /// Sets the zone's stock of one accelerator and capacity kind from now (see
    /// [`crate::capacity::stock`]); waiting queued resources and MIGs look again at once.
    pub fn set_stock(&self, spec: StockSpec) {
        self.with_world(|w| set_stock(w, spec));
    }

    /// The stock entries as `GET /emulator/v1/stock` shows them.
    pub fn stock(&self) -> Value {
        self.with_world(|w| stock_view(w))
    }

    /// Enforces a per-minute rate quota on a group of methods (see
    /// [`crate::capacity::quotas`]); `per_minute: None` is the group's documented default.
    pub fn set_rate_quota(&self, quota: RateQuota) {
        self.with_world(|w| w.cloud.capacity.quotas.set(quota));
    }

    /// Calls of `group` refused by its rate quota so far.
    pub fn rate_quota_refusals(&self, group: crate::capacity::quotas::QuotaGroup) -> u64 {
        self.with_world(|w| w.cloud.capacity.quotas.refused(group))
    }
}
