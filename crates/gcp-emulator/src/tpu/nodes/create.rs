//! nodes.create, and the nodes a queued resource provisions: request checks, the accelerator
//! lookup and the server defaults Cloud TPU fills in.

use super::*;
use crate::capacity::CapacityKind;

const DEFAULT_SCOPES: [&str; 6] = [
    "https://www.googleapis.com/auth/devstorage.read_write",
    "https://www.googleapis.com/auth/logging.write",
    "https://www.googleapis.com/auth/service.management",
    "https://www.googleapis.com/auth/servicecontrol",
    "https://www.googleapis.com/auth/cloud-platform",
    "https://www.googleapis.com/auth/pubsub",
];

fn node_id_ok(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && !id.ends_with('-')
}

/// Resolves the accelerator from `acceleratorType` and/or `acceleratorConfig`.
pub fn resolve_accel(node: &Value, field: &str) -> ApiResult<Accel> {
    let by_type = node["acceleratorType"].as_str();
    let cfg = node.get("acceleratorConfig");
    match (by_type, cfg) {
        (Some(t), _) => catalog::by_type(t).ok_or_else(|| {
            ApiError::invalid_field(
                &format!("{field}.accelerator_type"),
                format!("Invalid value at '{field}.accelerator_type': unknown accelerator type \"{t}\""),
            )
        }),
        (None, Some(c)) => {
            let (ty, topo) = (
                c["type"].as_str().unwrap_or(""),
                c["topology"].as_str().unwrap_or(""),
            );
            catalog::by_config(ty, topo).ok_or_else(|| {
                ApiError::invalid_field(
                    &format!("{field}.accelerator_config"),
                    format!("Invalid value at '{field}.accelerator_config': unsupported topology \"{topo}\" for type {ty}"),
                )
            })
        }
        (None, None) => Err(ApiError::invalid_field(
            &format!("{field}.accelerator_type"),
            format!("Invalid value at '{field}': one of accelerator_type or accelerator_config is required"),
        )),
    }
}

/// The node's `networkConfig` with its network and subnetwork as full resource names (`default`
/// when not given).
fn default_network_config(node: &Value, project: &str, region: &str) -> Value {
    let nc = node.get("networkConfig").cloned().unwrap_or_else(|| json!({}));
    let mut nc = nc.as_object().cloned().unwrap_or_default();
    let net = nc
        .get("network")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    let net = if net.contains('/') {
        net
    } else {
        format!("projects/{project}/global/networks/{net}")
    };
    let sub = nc
        .get("subnetwork")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    let sub = if sub.contains('/') {
        sub
    } else {
        format!("projects/{project}/regions/{region}/subnetworks/{sub}")
    };
    nc.insert("network".into(), json!(net));
    nc.insert("subnetwork".into(), json!(sub));
    Value::Object(nc)
}

/// The node's `serviceAccount`: the project's default compute account with the default scopes
/// when no email is given, else the email with its scopes (`cloud-platform` when none).
fn default_service_account(node: &Value, number: u64) -> Value {
    let sa = node.get("serviceAccount").cloned().unwrap_or_else(|| json!({}));
    let email = sa["email"].as_str().map(str::to_string);
    match email {
        None => {
            json!({"email": format!("{number}-compute@developer.gserviceaccount.com"), "scope": DEFAULT_SCOPES})
        }
        Some(e) => {
            let scope = sa
                .get("scope")
                .cloned()
                .unwrap_or_else(|| json!(["https://www.googleapis.com/auth/cloud-platform"]));
            json!({"email": e, "scope": scope})
        }
    }
}

/// Fills the server defaults of a Node the way Cloud TPU does.
pub fn fill_defaults(w: &mut Cloud, project: &str, zone: &str, name: &str, node: &mut Value, accel: &Accel) {
    let number = w.project_number(project);
    let region = zone.rsplit_once('-').map(|(r, _)| r).unwrap_or(zone).to_string();
    node["name"] = json!(name);
    node["acceleratorType"] = json!(accel.accelerator_type);
    node["acceleratorConfig"] = json!({"topology": accel.topology, "type": accel.config_type});
    node["apiVersion"] = json!("V2");
    node["createTime"] = json!(ts(w.now));
    let seq = w.next_seq();
    node["id"] = json!((1_700_000_000_000_000_000u64 + seq * 7_919).to_string());
    if node.get("cidrBlock").is_none() {
        node["cidrBlock"] = json!(format!("10.{}.{}.0/24", 100 + seq % 100, seq % 250));
    }
    if node.get("networkConfigs").is_none() {
        node["networkConfig"] = default_network_config(node, project, &region);
    }
    node["serviceAccount"] = default_service_account(node, number);
    let external = node["networkConfig"]["enableExternalIps"]
        .as_bool()
        .unwrap_or(false);
    let endpoints: Vec<Value> = (0..accel.hosts)
        .map(|h| {
            let mut ep =
                json!({"ipAddress": format!("10.{}.{}.{}", 100 + seq % 100, seq % 250, 2 + h), "port": 8470});
            if external {
                ep["accessConfig"] =
                    json!({"externalIp": format!("34.{}.{}.{}", 16 + seq % 200, seq % 250, 2 + h)});
            }
            ep
        })
        .collect();
    node["networkEndpoints"] = Value::Array(endpoints);
}

/// The `nodeId` query parameter, which must name the node the way Cloud TPU allows.
fn checked_node_id(q: &Query) -> ApiResult<&str> {
    let node_id = q
        .get("nodeId")
        .ok_or_else(|| ApiError::invalid_field("node_id", "node_id is required"))?;
    if !node_id_ok(node_id) {
        return Err(ApiError::invalid_field(
            "node_id",
            format!(
                "Invalid value at 'node_id': \"{node_id}\" must be 1-63 characters of lowercase letters, digits and hyphens, starting with a letter and not ending with a hyphen"
            ),
        ));
    }
    Ok(node_id)
}

/// Refuses a create the zone has no capacity for: a stockout or a call-shaped capacity fault
/// fails the call; an operation-shaped one lets the call succeed and dooms its operation.
fn check_capacity(
    w: &mut Cloud,
    tpu: &Tpu,
    (project, zone, name): (&str, &str, &str),
    accel: &Accel,
    kind: CapacityKind,
) -> ApiResult<()> {
    if w.faults.stocked_out(zone, &accel.accelerator_type) {
        return Err(ApiError::new(
            Code::ResourceExhausted,
            format!(
                "There is no more capacity in the zone \"{zone}\"; you can try in another zone where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x{:x}]",
                w.next_seq()
            ),
        ));
    }
    let chips = u64::from(accel.chips);
    if !crate::tpu::stock::admits(w, tpu, zone, &accel.accelerator_type, kind, chips) {
        return Err(crate::capacity::stock::tpu_stockout(
            zone,
            &accel.accelerator_type,
            kind,
        ));
    }
    // Issue 21 item 4: capacity errors in both shapes (`faults::Fault::CapacityError`).
    w.faults.doomed_creates.remove(name);
    if let Some(c) = w.faults.capacity_error(zone, &accel.accelerator_type) {
        let err = c.error(project, &accel.accelerator_type);
        match c.shape {
            crate::faults::ErrorShape::Call => return Err(err),
            crate::faults::ErrorShape::Operation => {
                w.faults.doomed_creates.insert(name.to_string(), err);
            }
        }
    }
    Ok(())
}

pub fn create(
    w: &mut Cloud,
    tpu: &mut Tpu,
    project: &str,
    zone: &str,
    q: &Query,
    body: &Value,
) -> ApiResult<Reply> {
    let parent = format!("projects/{project}/locations/{zone}");
    let node_id = checked_node_id(q)?;
    let mut node = schema::validate(Svc::Tpu, "Node", body, "node")?;
    if node.get("networkConfig").is_some() && node.get("networkConfigs").is_some() {
        return Err(ApiError::invalid_field(
            "node.network_configs",
            "network_config and network_configs are mutually exclusive",
        ));
    }
    let accel = resolve_accel(&node, "node")?;
    let name = format!("{parent}/nodes/{node_id}");
    if tpu.nodes.contains_key(&name) {
        return Err(ApiError::already_exists(format!(
            "Resource '{name}' already exists"
        )));
    }
    let kind = CapacityKind::of_node(&node);
    check_capacity(w, tpu, (project, zone, &name), &accel, kind)?;
    fill_defaults(w, project, zone, &name, &mut node, &accel);
    node["state"] = json!("CREATING");
    let op_name = tpu_op_name(w, &parent);
    let op = lro::start(
        &mut w.ops,
        Svc::Tpu,
        op_name.clone(),
        op_metadata(w.now, &name, "create"),
    );
    let timer = w.schedule(
        Cloud::add(w.now, w.cfg.durations.tpu_create),
        TimerKind::Node,
        &name,
    );
    tpu.nodes.insert(
        name,
        NodeRec {
            body: node,
            op: Some(op_name),
            timer: Some(timer),
            workload_timer: None,
            workload_done: false,
            workload_end: None,
            workload_env: None,
            run: RunState::default(),
            hosts: accel.hosts,
            kind,
        },
    );
    Ok(Reply::op(op))
}

/// Inserts a node created by a queued resource (no operation of its own).
pub fn insert_for_qr(
    w: &mut Cloud,
    tpu: &mut Tpu,
    spec_parent: &str,
    node_id: &str,
    node: &Value,
    qr: &str,
    (multislice, kind): (bool, CapacityKind),
) -> ApiResult<String> {
    let (project, zone) = crate::tpu::split_parent(spec_parent)?;
    let accel = resolve_accel(node, "queued_resource.tpu.node_spec.node")?;
    let name = format!("{spec_parent}/nodes/{node_id}");
    let mut body = node.clone();
    fill_defaults(w, &project, &zone, &name, &mut body, &accel);
    body["state"] = json!("CREATING");
    body["queuedResource"] = json!(qr);
    if multislice {
        body["multisliceNode"] = json!(true);
    }
    let timer = w.schedule(
        Cloud::add(w.now, w.cfg.durations.qr_provision),
        TimerKind::Node,
        &name,
    );
    tpu.nodes.insert(
        name.clone(),
        NodeRec {
            body,
            op: None,
            timer: Some(timer),
            workload_timer: None,
            workload_done: false,
            workload_end: None,
            workload_env: None,
            run: RunState::default(),
            hosts: accel.hosts,
            kind,
        },
    );
    Ok(name)
}
