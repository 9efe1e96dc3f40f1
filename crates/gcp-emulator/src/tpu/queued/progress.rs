//! The queued resource state machine: the timer that moves it on, the wait for capacity and the
//! provisioning of its nodes.

use super::*;

/// Re-checks waiting queued resources now (after a stockout is lifted).
pub fn recheck_waiting(w: &mut Cloud, tpu: &mut Tpu) {
    let waiting: Vec<String> = tpu
        .qrs
        .iter()
        .filter(|(_, r)| r.state() == "WAITING_FOR_RESOURCES")
        .map(|(k, _)| k.clone())
        .collect();
    for name in waiting {
        let t = w.schedule(w.now, TimerKind::QueuedResource, &name);
        if let Some(r) = tpu.qrs.get_mut(&name) {
            r.timer = Some(t);
        }
    }
}

/// No capacity for one of the queued resource's node specs: a stockout fault, or not enough of
/// the zone's stock of its kind for all its nodes ([`crate::tpu::stock`]).
fn stocked_out(w: &Cloud, tpu: &Tpu, rec: &QrRec) -> bool {
    let kind = crate::capacity::CapacityKind::of_queued_resource(&rec.body);
    rec.body["tpu"]["nodeSpec"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|spec| {
            let zone = spec["parent"]
                .as_str()
                .and_then(|p| p.rsplit('/').next())
                .unwrap_or("");
            let Ok(accel) = crate::tpu::nodes::resolve_accel(&spec["node"], "node") else {
                return false;
            };
            let nodes = spec["multisliceParams"]["nodeCount"].as_u64().unwrap_or(1);
            let chips = u64::from(accel.chips) * nodes;
            w.faults.stocked_out(zone, &accel.accelerator_type)
                || !crate::tpu::stock::admits(w, tpu, zone, &accel.accelerator_type, kind, chips)
        })
}

fn reschedule(w: &mut Cloud, tpu: &mut Tpu, name: &str, at: DateTime<Utc>) {
    let t = w.schedule(at, TimerKind::QueuedResource, name);
    if let Some(r) = tpu.qrs.get_mut(name) {
        r.timer = Some(t);
    }
}

/// WAITING_FOR_RESOURCES: FAILED once `validUntil` has passed, else provisioned when the window
/// is open and capacity (or its reservation) allows, else checked again after `qr_wait`.
fn fire_waiting(w: &mut Cloud, tpu: &mut Tpu, name: &str, now: DateTime<Utc>, qr_wait: std::time::Duration) {
    let rec = tpu.qrs.get_mut(name).expect("present");
    if rec.valid_until.is_some_and(|u| now >= u) {
        // FAILED is documented ("unavailability of resources within the constraints of
        // the request (e.g., the 'valid until' start timing constraint expired)", tpu v2
        // `QueuedResourceState.state`); the `failedData.error` code and message are not:
        // RESOURCE_EXHAUSTED is this emulator's choice, and the operator does not key on
        // it (docs/reliability.md, "Not verified against real GCP").
        let err = ApiError::new(
            Code::ResourceExhausted,
            "QueuedResource could not be provisioned before its valid_until time: insufficient capacity",
        );
        set_state(&mut rec.body, "FAILED", Some("SERVICE"));
        rec.body["state"]["failedData"] = json!({"error": err.rpc_status()});
        return;
    }
    let waiting_for_window = rec.valid_after.is_some_and(|a| now < a);
    let rec_snapshot = rec.clone();
    // A named reservation decides alone: missing -> FAILED, full -> wait (stockouts
    // do not touch reserved capacity). See tpu/reservations.rs for the sources.
    let held = match crate::tpu::reservations::named(&rec_snapshot) {
        None => stocked_out(w, tpu, &rec_snapshot),
        Some(r) => match crate::tpu::reservations::verdict(tpu, name, &rec_snapshot, r) {
            crate::tpu::reservations::Verdict::Provision => false,
            crate::tpu::reservations::Verdict::Wait => true,
            crate::tpu::reservations::Verdict::Fail(err) => {
                let rec = tpu.qrs.get_mut(name).expect("present");
                set_state(&mut rec.body, "FAILED", Some("SERVICE"));
                rec.body["state"]["failedData"] = json!({"error": err.rpc_status()});
                return;
            }
        },
    };
    if waiting_for_window || held {
        let mut next = Cloud::add(now, qr_wait);
        if let Some(until) = rec_snapshot.valid_until {
            next = next.min(until).max(now);
        }
        reschedule(w, tpu, name, next);
        return;
    }
    provision(w, tpu, name, &rec_snapshot);
}

/// State-machine step for a queued resource.
pub fn fire(w: &mut Cloud, tpu: &mut Tpu, seq: u64, name: &str) {
    let Some(rec) = tpu.qrs.get_mut(name) else { return };
    if rec.timer != Some(seq) {
        return;
    }
    rec.timer = None;
    let now = w.now;
    let d = w.cfg.durations.clone();
    match rec.state().to_string().as_str() {
        "CREATING" => {
            set_state(&mut rec.body, "ACCEPTED", None);
            let resp = lro::any(QR_TYPE, &rec.body);
            if let Some(op) = rec.op.take() {
                lro::finish_ok(&mut w.ops, w.now, &op, resp);
            }
            reschedule(w, tpu, name, Cloud::add(now, d.qr_queue));
        }
        "ACCEPTED" => {
            set_state(&mut rec.body, "WAITING_FOR_RESOURCES", None);
            let mut next = Cloud::add(now, d.qr_wait);
            if let Some(after) = rec.valid_after {
                next = next.max(after);
            }
            if let Some(until) = rec.valid_until {
                next = next.min(until);
            }
            reschedule(w, tpu, name, next);
        }
        "WAITING_FOR_RESOURCES" => fire_waiting(w, tpu, name, now, d.qr_wait),
        "PROVISIONING" => {
            set_state(&mut rec.body, "ACTIVE", None);
        }
        "SUSPENDING" => {
            set_state(&mut rec.body, "SUSPENDED", Some("SERVICE"));
            let nodes = std::mem::take(&mut rec.nodes);
            for n in nodes {
                tpu.nodes.remove(&n);
            }
        }
        "DELETING" => {
            let rec = tpu.qrs.remove(name).expect("present");
            for n in &rec.nodes {
                tpu.nodes.remove(n);
            }
            if let Some(op) = rec.op {
                lro::finish_ok(&mut w.ops, w.now, &op, json!({"@type": lro::EMPTY}));
            }
        }
        _ => {}
    }
}

fn provision(w: &mut Cloud, tpu: &mut Tpu, name: &str, rec: &QrRec) {
    let mut created = Vec::new();
    let mut failure = None;
    for (i, spec) in rec.body["tpu"]["nodeSpec"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let parent = spec["parent"].as_str().unwrap_or_default();
        let (ids, multislice) = match spec_node_ids(spec, i) {
            Ok(v) => v,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        for id in ids {
            let kind = crate::capacity::CapacityKind::of_queued_resource(&rec.body);
            match crate::tpu::nodes::insert_for_qr(
                w,
                tpu,
                parent,
                &id,
                &spec["node"],
                name,
                (multislice, kind),
            ) {
                Ok(n) => created.push(n),
                Err(e) => failure = Some(e),
            }
        }
    }
    let at = Cloud::add(w.now, w.cfg.durations.qr_provision);
    let t = w.schedule(at, TimerKind::QueuedResource, name);
    let Some(r) = tpu.qrs.get_mut(name) else { return };
    r.nodes = created;
    match failure {
        Some(e) => {
            set_state(&mut r.body, "FAILED", Some("SERVICE"));
            r.body["state"]["failedData"] = json!({"error": e.rpc_status()});
        }
        None => {
            set_state(&mut r.body, "PROVISIONING", None);
            r.timer = Some(t);
        }
    }
}
