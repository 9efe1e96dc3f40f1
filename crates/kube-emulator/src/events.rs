//! core/v1 and events.k8s.io/v1 Events are two views of the same objects (stored in the core
//! shape); these convert between them as the apiserver does.

use serde_json::{Map, Value};

/// (core/v1 field, events.k8s.io/v1 field)
const RENAMES: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(obj: &Value, to_events_v1: bool, api_version: &str) -> Value {
    let Some(map) = obj.as_object() else {
        return obj.clone();
    };
    let mut out = Map::new();
    for (k, v) in map {
        let renamed = RENAMES
            .iter()
            .find(|(core, ev)| if to_events_v1 { k == core } else { k == ev })
            .map(|(core, ev)| if to_events_v1 { *ev } else { *core })
            .unwrap_or(k.as_str());
        out.insert(renamed.to_string(), v.clone());
    }
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    Value::Object(out)
}

pub fn to_events_v1(core: &Value) -> Value {
    rename(core, true, "events.k8s.io/v1")
}

pub fn to_core(events_v1: &Value) -> Value {
    rename(events_v1, false, "v1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips() {
        let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "regarding": {"name": "x"}, "note": "hi", "reason": "R"});
        let core = to_core(&ev);
        assert_eq!(core["involvedObject"]["name"], "x");
        assert_eq!(core["message"], "hi");
        assert_eq!(to_events_v1(&core), ev);
    }
}
