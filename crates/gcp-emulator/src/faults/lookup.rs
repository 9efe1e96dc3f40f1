//! What the services ask of the recorded faults: name and accelerator patterns, and the call
//! failures, lost replies, latency and capacity errors due now.

use super::*;

/// `pattern` is an accelerator type (`v5p-8`) or a family (`v5p`, matches `v5p-*`).
pub fn accel_matches(pattern: &str, accelerator_type: &str) -> bool {
    pattern == accelerator_type
        || accelerator_type
            .strip_prefix(pattern)
            .is_some_and(|rest| rest.starts_with('-'))
}

pub(super) fn matches(pattern: &str, value: &str) -> bool {
    pattern == "*" || pattern == value
}

/// `name` given as a full resource name or its last segment.
/// The value `map` holds for `full` or its last segment.
pub fn matching<'a, V>(map: &'a BTreeMap<String, V>, full: &str) -> Option<&'a V> {
    map.get(full).or_else(|| map.get(id_of(full)))
}

pub fn name_matches(set: &BTreeSet<String>, full: &str) -> bool {
    set.contains(full) || set.contains(id_of(full))
}

/// The last segment of a full resource name (a fault may name a resource either way).
fn id_of(full: &str) -> &str {
    full.rsplit('/').next().unwrap_or(full)
}

/// Consumes one use of the first counted fault matching `service` + `method` (dropping it when
/// used up): the code and message to answer with.
fn take_counted(list: &mut Vec<FailCallsState>, service: &str, method: &str) -> Option<(Code, String)> {
    let f = list
        .iter_mut()
        .find(|f| f.remaining > 0 && matches(&f.service, service) && matches(&f.method, method))?;
    f.remaining -= 1;
    let out = (
        f.code,
        f.message
            .clone()
            .unwrap_or_else(|| f.code.default_message().to_string()),
    );
    list.retain(|f| f.remaining > 0);
    Some(out)
}

impl Faults {
    /// Consumes a matching `FailCalls` or draws a random failure. Returns the code and message.
    pub fn take_call_failure(&mut self, service: &str, method: &str) -> Option<(Code, String)> {
        if let Some(out) = take_counted(&mut self.fail_calls, service, method) {
            return Some(out);
        }
        if let Some(r) = self
            .random
            .iter_mut()
            .find(|r| r.service.as_deref().is_none_or(|s| s == service))
        {
            // splitmix64: tiny, seedable, and stable across dependency versions.
            r.state = r.state.wrapping_add(0x9E3779B97F4A7C15);
            let mut z = r.state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
            z ^= z >> 31;
            let draw = (z >> 11) as f64 / (1u64 << 53) as f64;
            if draw < r.rate {
                return Some((r.code, r.code.default_message().to_string()));
            }
        }
        None
    }

    /// Consumes a matching [`Fault::LoseReply`]: the error to answer once the call was carried out.
    pub fn take_lost_reply(&mut self, service: &str, method: &str) -> Option<(Code, String)> {
        take_counted(&mut self.lost_replies, service, method)
    }

    /// Real milliseconds to wait before answering this call.
    pub fn take_latency(&mut self, service: &str, method: &str) -> u64 {
        let mut total = 0;
        for l in &mut self.latency {
            if matches(&l.service, service)
                && l.method.as_deref().is_none_or(|m| matches(m, method))
                && l.remaining != Some(0)
            {
                total += l.millis;
                if let Some(r) = &mut l.remaining {
                    *r -= 1;
                }
            }
        }
        self.latency.retain(|l| l.remaining != Some(0));
        total
    }

    /// True when `zone` has no capacity for `accelerator_type` (e.g. `v5p-8`).
    pub fn stocked_out(&self, zone: &str, accelerator_type: &str) -> bool {
        self.stockouts
            .iter()
            .any(|(z, a)| z == zone && accel_matches(a, accelerator_type))
    }

    /// The active [`Fault::CapacityError`] for a create of `accelerator_type` in `zone`.
    pub fn capacity_error(&self, zone: &str, accelerator_type: &str) -> Option<&CapacityErrorState> {
        self.capacity_errors
            .iter()
            .find(|c| c.zone == zone && accel_matches(&c.accelerator, accelerator_type))
    }
}
