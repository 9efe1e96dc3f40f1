//! A MIG's member VMs: their names, their creation, and the reconcile that keeps `targetSize` of
//! them (recreating a preempted or missing one when capacity allows).

use super::*;

/// Member instance keys (including those being deleted).
pub fn members(ce: &ComputeState, key: &str) -> Vec<String> {
    ce.instances
        .iter()
        .filter(|(_, r)| r.igm.as_deref() == Some(key))
        .map(|(k, _)| k.clone())
        .collect()
}

/// Creates VMs `names` from the MIG's template (tagged with resize request `rr`).
pub fn create_members(w: &mut Cloud, ce: &mut ComputeState, key: &str, names: Vec<String>, rr: Option<&str>) {
    let Some(g) = ce.igms.get(key) else {
        return;
    };
    let Some(tpl) = ce.templates.get(&g.template) else {
        return;
    };
    let (project, zone, machine) = (g.project.clone(), g.zone.clone(), g.machine);
    let mut props = tpl["properties"].clone();
    if let Some(m) = props.as_object_mut() {
        m.remove("machineType");
    }
    let number = w.project_number(&project);
    let mig_name = key.rsplit('/').next().unwrap_or_default();
    let mut items = props["metadata"]["items"].as_array().cloned().unwrap_or_default();
    items.push(json!({"key": "created-by", "value": format!("projects/{number}/zones/{zone}/instanceGroupManagers/{mig_name}")}));
    props["metadata"]["items"] = Value::Array(items);
    for name in names {
        let mut body = props.clone();
        body["name"] = json!(name);
        instances::create(
            w,
            ce,
            NewInstance {
                project: project.clone(),
                zone: zone.clone(),
                name,
                body,
                machine,
                igm: Some(key.to_string()),
                resize: rr.map(str::to_string),
                insert_op: None,
            },
        );
    }
}

/// A fresh VM name `{baseInstanceName}-{4 chars}`, unique in the zone.
pub fn new_name(w: &mut Cloud, ce: &mut ComputeState, key: &str) -> String {
    let (base, zone_prefix) = {
        let g = &ce.igms[key];
        (
            g.body["baseInstanceName"].as_str().unwrap_or("vm").to_string(),
            format!("projects/{}/zones/{}/instances/", g.project, g.zone),
        )
    };
    loop {
        let n = format!("{base}-{}", crate::compute::suffix(w));
        if !ce.instances.contains_key(&format!("{zone_prefix}{n}")) {
            return n;
        }
    }
}

/// Brings the MIG toward `targetSize`: creates all missing VMs at once when capacity allows,
/// else keeps their names pending (reported as `currentActions.creating`).
pub fn reconcile(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    let Some(g) = ce.igms.get(key) else {
        return;
    };
    if g.deleting.is_some() {
        return;
    }
    let live = ce
        .instances
        .values()
        .filter(|r| r.igm.as_deref() == Some(key) && r.status() != "STOPPING")
        .count() as i64;
    let missing = g.target_size - live;
    let (zone, machine) = (g.zone.clone(), g.machine);
    if missing <= 0 {
        ce.igms.get_mut(key).expect("present").pending.clear();
        return;
    }
    let mut names = std::mem::take(&mut ce.igms.get_mut(key).expect("present").pending);
    // A reserved name someone took meanwhile (instances.insert) is replaced.
    let prefix = format!("projects/{}/zones/{zone}/instances/", ce.igms[key].project);
    names.retain(|n| !ce.instances.contains_key(&format!("{prefix}{n}")));
    names.truncate(missing as usize);
    while names.len() < missing as usize {
        names.push(new_name(w, ce, key));
    }
    let kind = super::kind(ce, &ce.igms[key]);
    if instances::has_capacity(w, ce, &zone, machine, missing as u64, kind) {
        create_members(w, ce, key, names, None);
    } else {
        ce.igms.get_mut(key).expect("present").pending = names;
    }
}

/// A member is gone: finish a deletion, or replace it.
pub fn member_gone(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    let Some(g) = ce.igms.get(key) else {
        return;
    };
    match g.deleting.clone() {
        Some(op) if members(ce, key).is_empty() => {
            ce.igms.remove(key);
            let prefix = format!("{key}/resizeRequests/");
            ce.resize.retain(|k, _| !k.starts_with(&prefix));
            operations::done(w, ce, &op);
        }
        Some(_) => {}
        None => reconcile(w, ce, key),
    }
}
