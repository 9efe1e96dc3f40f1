//! `Node.upcomingMaintenance`: the maintenance the TPU service announces for a node (scheduled
//! maintenance days ahead, emergency maintenance at short notice).
//!
//! The field is in the TPU API v2 (`shared/gcp-api/tpu.v2.json`, `UpcomingMaintenance`, output
//! only) but not in `google-cloud-tpu-v2`'s `Node` model. That model's deserializer keeps the
//! fields it does not know and its serializer writes them back, so the notice is read from the
//! node as Google's client decoded it, with no second request and no model of our own for the
//! rest of the node. Google's client asks for enums as numbers (`$alt=json;enum-encoding=int`),
//! and a field the client does not know is kept as sent, so its enums are read as either form.

use serde::Deserialize;

use crate::tpu_v2::model::Node;

/// One node's announced maintenance, as the API spells it (RFC 3339 times, enum names).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpcomingMaintenance {
    /// `SCHEDULED` or `UNSCHEDULED`.
    #[serde(rename = "type", default, deserialize_with = "maintenance_type")]
    pub kind: String,
    /// Whether the customer may start it earlier (`performMaintenance`).
    #[serde(default)]
    pub can_reschedule: bool,
    #[serde(default)]
    pub window_start_time: Option<String>,
    #[serde(default)]
    pub window_end_time: Option<String>,
    #[serde(default)]
    pub latest_window_start_time: Option<String>,
    /// `PENDING` or `ONGOING`.
    #[serde(default, deserialize_with = "maintenance_status")]
    pub maintenance_status: String,
}

/// An enum of the notice by name, or by its number in the TPU API v2 (`UpcomingMaintenance`).
fn enum_name<'de, D: serde::Deserializer<'de>>(d: D, names: &[&str]) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(name) => name,
        serde_json::Value::Number(n) => n
            .as_u64()
            .and_then(|i| names.get(i as usize))
            .map_or_else(|| n.to_string(), |name| (*name).to_string()),
        _ => String::new(),
    })
}

fn maintenance_type<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    enum_name(d, &["UNKNOWN_TYPE", "SCHEDULED", "UNSCHEDULED"])
}

fn maintenance_status<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    enum_name(d, &["UNKNOWN", "PENDING", "ONGOING"])
}

impl UpcomingMaintenance {
    /// Under way now.
    pub fn ongoing(&self) -> bool {
        self.maintenance_status == "ONGOING"
    }

    /// The window's start, parsed.
    pub fn window_start(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        parse(self.window_start_time.as_deref())
    }
}

/// Parses an RFC 3339 time of the notice.
pub fn parse(time: Option<&str>) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(time?)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// The node's announced maintenance, if any. A notice the client could not carry (it changed
/// shape) reads as none rather than failing the pass.
pub fn upcoming_maintenance(node: &Node) -> Option<UpcomingMaintenance> {
    let mut json = serde_json::to_value(node).ok()?;
    let notice = json.get_mut("upcomingMaintenance")?.take();
    serde_json::from_value(notice).ok()
}

/// The TPU node that stands for Compute Engine instances carrying the instance's notice
/// (`resourceStatus.upcomingMaintenance`, the same fields as the TPU API's), where
/// [`upcoming_maintenance`] reads it: the node model has no field for it, so it goes in as the TPU
/// API would send it.
pub fn carry_notice(node: Node, notice: Option<&crate::compute_v1::model::UpcomingMaintenance>) -> Node {
    let Some(notice) = notice else {
        return node;
    };
    let (Ok(mut json), Ok(notice)) = (serde_json::to_value(&node), serde_json::to_value(notice)) else {
        return node;
    };
    json["upcomingMaintenance"] = notice;
    serde_json::from_value(json).unwrap_or(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the TPU API returns for a node under notice survives Google's client: decoded into
    /// its `Node`, then read back here.
    #[test]
    fn a_notice_survives_the_official_model() {
        let wire = serde_json::json!({
            "name": "projects/p/locations/z/nodes/n",
            "state": "READY",
            "health": "HEALTHY",
            "upcomingMaintenance": {
                "type": "SCHEDULED",
                "canReschedule": true,
                "windowStartTime": "2026-12-01T10:00:00Z",
                "windowEndTime": "2026-12-01T12:00:00Z",
                "latestWindowStartTime": "2026-12-01T10:00:00Z",
                "maintenanceStatus": "PENDING"
            }
        });
        let node: Node = serde_json::from_value(wire).unwrap();
        let m = upcoming_maintenance(&node).expect("the notice is kept");
        assert_eq!(m.kind, "SCHEDULED");
        assert!(m.can_reschedule && !m.ongoing());
        assert_eq!(
            m.window_start().unwrap().to_rfc3339(),
            "2026-12-01T10:00:00+00:00"
        );
        // As Google's client receives it: enums as numbers.
        let numbered =
            serde_json::json!({"name": "n", "upcomingMaintenance": {"type": 2, "maintenanceStatus": 2}});
        let m = upcoming_maintenance(&serde_json::from_value(numbered).unwrap()).unwrap();
        assert_eq!((m.kind.as_str(), m.ongoing()), ("UNSCHEDULED", true));
        let plain: Node = serde_json::from_value(serde_json::json!({"name": "n", "state": "READY"})).unwrap();
        assert_eq!(upcoming_maintenance(&plain), None);
    }

    /// A Compute Engine instance's notice reads like a TPU node's.
    #[test]
    fn an_instance_notice_is_carried_on_its_node() {
        let notice: crate::compute_v1::model::UpcomingMaintenance =
            serde_json::from_value(serde_json::json!({
                "type": "SCHEDULED", "canReschedule": true, "maintenanceStatus": "PENDING",
                "windowStartTime": "2026-12-01T10:00:00Z", "windowEndTime": "2026-12-01T11:00:00Z"
            }))
            .unwrap();
        let node = carry_notice(Node::new().set_name("n"), Some(&notice));
        let m = upcoming_maintenance(&node).expect("carried");
        assert_eq!(
            (m.kind.as_str(), m.can_reschedule, m.ongoing()),
            ("SCHEDULED", true, false)
        );
        assert_eq!(node.name, "n");
        assert_eq!(upcoming_maintenance(&carry_notice(Node::new(), None)), None);
    }
}
