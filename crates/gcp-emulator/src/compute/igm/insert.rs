//! instanceGroupManagers.insert: the template, workload policy and target size checks, and the
//! new MIG's output fields.

use super::*;

/// The MIG's instance template: it must exist and be in the MIG's region. Returns its name and
/// body.
fn checked_template<'a>(
    ce: &'a ComputeState,
    v: &Value,
    project: &str,
    region: &str,
) -> ApiResult<(String, &'a Value)> {
    let t_url = v["instanceTemplate"]
        .as_str()
        .ok_or_else(|| errors::required("resource.instanceTemplate"))?;
    let template = crate::compute::rel(t_url).to_string();
    let tpl = ce.templates.find(&template, errors::not_found)?;
    if !template.starts_with(&format!("projects/{project}/regions/{region}/")) {
        return Err(errors::invalid_field(
            "resource.instanceTemplate",
            t_url,
            &format!("The instance template must be in region {region} or global."),
        ));
    }
    Ok((template, tpl))
}

/// The MIG's workload policy, if it names one: it must exist.
fn checked_policy(ce: &ComputeState, v: &Value) -> ApiResult<Option<String>> {
    Ok(match v["resourcePolicies"]["workloadPolicy"].as_str() {
        None => None,
        Some(p) => {
            let k = crate::compute::rel(p).to_string();
            if !ce.policies.contains_key(&k) {
                return Err(errors::not_found(&k));
            }
            Some(k)
        }
    })
}

/// `targetSize` must be >= 0, and 0 for a flex-start template.
fn check_target_size(target: i64, flex: bool) -> ApiResult<()> {
    if target < 0 {
        return Err(errors::invalid_field(
            "resource.targetSize",
            &target.to_string(),
            "Must be >= 0.",
        ));
    }
    if flex && target > 0 {
        // Assumed: flex-start MIGs are created empty and grow by resize requests only
        // (https://cloud.google.com/compute/docs/instance-groups/create-resize-requests-mig).
        return Err(errors::invalid_field(
            "resource.targetSize",
            &target.to_string(),
            "A MIG whose template uses the FLEX_START provisioning model must be created with targetSize 0; add VMs with resize requests.",
        ));
    }
    Ok(())
}

/// The output-only fields of a new MIG, and its references as full URLs.
fn fill_output_fields(
    w: &mut Cloud,
    v: &mut Value,
    scope: &str,
    name: &str,
    template: &str,
    policy: Option<&str>,
    base: String,
) {
    v["kind"] = json!("compute#instanceGroupManager");
    v["id"] = json!(crate::compute::numeric_id(w));
    v["creationTimestamp"] = json!(ts(w.now));
    v["selfLink"] = json!(format!("{BASE}{scope}/instanceGroupManagers/{name}"));
    v["zone"] = json!(format!("{BASE}{scope}"));
    v["instanceGroup"] = json!(format!("{BASE}{scope}/instanceGroups/{name}"));
    v["instanceTemplate"] = json!(format!("{BASE}{template}"));
    if let Some(p) = policy {
        v["resourcePolicies"]["workloadPolicy"] = json!(format!("{BASE}{p}"));
    }
    v["baseInstanceName"] = json!(base);
    v["fingerprint"] = json!("AAAAAAAAAAA=");
}

pub fn insert(
    w: &mut Cloud,
    ce: &mut ComputeState,
    project: &str,
    scope: &str,
    req: &Req,
) -> ApiResult<Value> {
    if let Some(op) = operations::replay(w, ce, scope, req)? {
        return Ok(op);
    }
    let mut v = crate::compute::validate("InstanceGroupManager", req)?;
    let name = crate::compute::check_name(v["name"].as_str(), "resource.name")?;
    let key = format!("{scope}/instanceGroupManagers/{name}");
    if ce.igms.contains_key(&key) {
        return Err(errors::already_exists(&key));
    }
    let zone = scope.rsplit('/').next().unwrap_or_default().to_string();
    let region = crate::compute::region_of(&zone).to_string();
    let base = v["baseInstanceName"]
        .as_str()
        .ok_or_else(|| errors::required("resource.baseInstanceName"))?
        .to_string();
    let (template, tpl) = checked_template(ce, &v, project, &region)?;
    let machine = templates::machine(tpl).expect("validated at template insert");
    let flex = templates::is_flex_start(tpl);
    let policy = checked_policy(ce, &v)?;
    let target = v["targetSize"].as_i64().unwrap_or(0);
    check_target_size(target, flex)?;
    check_topology(ce, policy.as_deref(), machine, target)?;
    fill_output_fields(w, &mut v, scope, &name, &template, policy.as_deref(), base);
    ce.igms.insert(
        key.clone(),
        IgmRec {
            body: v,
            project: project.to_string(),
            zone: zone.clone(),
            template,
            policy,
            machine,
            target_size: target,
            pending: Vec::new(),
            deleting: None,
        },
    );
    let op = operations::start(
        w,
        ce,
        project,
        &Loc::Zone(zone),
        "compute.instanceGroupManagers.insert",
        &key,
    );
    operations::finish_later(w, &op);
    reconcile(w, ce, &key);
    Ok(operations::remember(w, ce, scope, req, &op))
}
