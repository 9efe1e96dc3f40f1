//! What each kind shows.

use tpu_operator_api::{
    conditions::{find_condition, types},
    kueue::KueueStatus,
    preprocess_batch::{PreprocessBatch, PreprocessBatchPhase},
    tpu_slice::{TpuSlice, TpuSlicePhase, TpuSliceStatus},
    training_pipeline::{CheckpointStatus, StageStatus, TrainingPipeline, TrainingPipelinePhase},
};

use super::{
    header,
    sheet::{Sheet, clock, span, stamp},
};

/// Kueue's gate, while it holds the object back.
fn kueue_wait(k: Option<&KueueStatus>) -> Option<String> {
    let k = k.filter(|k| !k.admitted)?;
    let position = k.position.map(|p| format!(", position {p}")).unwrap_or_default();
    Some(format!(
        "Kueue to admit Workload {} (LocalQueue {}{position})",
        k.workload, k.local_queue
    ))
}

pub fn pipeline(sheet: &mut Sheet, tp: &TrainingPipeline, logs_cmd: &str) {
    let st = tp.status.clone().unwrap_or_default();
    header(sheet, tp, "tpl");
    sheet.phase(&format!("{:?}", st.phase), &st.conditions, st.message.as_deref());
    let finished = matches!(
        st.phase,
        TrainingPipelinePhase::Succeeded | TrainingPipelinePhase::Failed
    );
    sheet.waits_for(finished, &st.conditions, kueue_wait(st.kueue.as_ref()));
    let mode = if tp.spec.training.tpu_vm.is_some() {
        "TPU VM"
    } else {
        "Vertex AI"
    };
    let shape = match (&st.accelerator_type, st.chips) {
        (Some(t), Some(c)) => format!("{t}, {c} chips, {mode}"),
        (Some(t), None) => format!("{t}, {mode}"),
        _ => mode.to_string(),
    };
    sheet.row("Training", &shape);
    sheet.row(
        "Attempts",
        &format!("{} (maxRetries {})", st.attempts, tp.spec.max_retries),
    );
    sheet.row("Run", &span(st.start_time.as_ref(), st.completion_time.as_ref()));
    stages(sheet, &st.stages);
    sheet.cost(st.estimated_cost.as_ref());
    if let Some(spent) = &st.time_spent {
        sheet.row("Time spent", &spent.summary());
    }
    sheet.row(
        "Checkpoint",
        &checkpoint(st.checkpoint.clone().unwrap_or_default()),
    );
    if let Some(model) = st.outputs.as_ref().and_then(|o| o.model_uri.as_ref()) {
        sheet.row("Model", model);
    }
    if let Some(kept) = &st.kept_slice {
        sheet.row(
            "Kept slice",
            &format!("TpuSlice {} until {}", kept.name, stamp(&kept.until)),
        );
    }
    sheet.links(st.links.as_ref(), logs_cmd);
}

/// One line per stage (state, times, cloud name), and its interruptions under it.
fn stages(sheet: &mut Sheet, stages: &[StageStatus]) {
    sheet.section("Stages");
    for s in stages {
        let name = format!("{:?}", s.name).to_lowercase();
        let state = format!("{:?}", s.state);
        let times = span(s.start_time.as_ref(), s.end_time.as_ref());
        let what = s
            .gcp_name
            .as_deref()
            .or(s.resource_name.as_deref())
            .unwrap_or("-");
        sheet.item(&format!("{name:<11}{state:<10} {times}  {what}"));
        if let Some(i) = &s.interruptions {
            let mut line = format!(
                "{:<11}interrupted: {} preemption(s), {} maintenance restart(s)",
                "", i.preemptions, i.maintenance_restarts
            );
            if i.slice_restarts > 0 {
                line.push_str(&format!(", {} slice(s) replaced alone", i.slice_restarts));
            }
            if let Some(m) = &i.maintenance {
                line.push_str(&format!("; {m}"));
            }
            sheet.item(&line);
        }
    }
}

pub fn slice(sheet: &mut Sheet, slice: &TpuSlice, logs_cmd: &str) {
    let st = slice.status.clone().unwrap_or_default();
    header(sheet, slice, "tpus");
    sheet.phase(&format!("{:?}", st.phase), &st.conditions, st.message.as_deref());
    sheet.waits_for(
        st.phase == TpuSlicePhase::Failed,
        &st.conditions,
        kueue_wait(st.kueue.as_ref()),
    );
    let accelerator = st.accelerator_type.clone().unwrap_or_else(|| "-".into());
    let (chips, hosts) = (st.chips.unwrap_or(0), st.hosts.unwrap_or(0));
    // The zone the slice asks or runs in (with a capacity plan, its rung's).
    let zone = st.zone.as_deref().unwrap_or(&slice.spec.zone);
    sheet.row(
        "Slice",
        &format!("{accelerator}, {chips} chips, {hosts} hosts, zone {zone}"),
    );
    if let Some(plan) = &st.capacity_plan {
        sheet.row("Capacity plan", &plan.summary());
    }
    if let Some(c) = find_condition(&st.conditions, types::MAINTENANCE_PENDING).filter(|c| c.status == "True")
    {
        sheet.row("Maintenance", &c.message);
    }
    if let Some(counts) = interruptions(&st) {
        sheet.row("Interrupted", &counts);
    }
    let node = match &st.node_id {
        Some(id) => {
            let state = st.node_state.as_deref().unwrap_or("-");
            let health = st.health.as_deref().map(|h| format!(", {h}")).unwrap_or_default();
            format!("{id} ({state}{health}): gcloud compute tpus tpu-vm ssh {id} --zone {zone}")
        }
        None => "none yet".into(),
    };
    sheet.row("Node", &node);
    if let Some(q) = &st.queued_resource_name {
        let state = st.queued_resource_state.as_deref().unwrap_or("-");
        sheet.row("Queued", &format!("{q} ({state})"));
    }
    sheet.row(
        "Incarnation",
        &format!("{} recreations, {} suspensions", st.recreations, st.suspensions),
    );
    let created = st.create_time.as_ref().map_or_else(|| "-".into(), stamp);
    let ready = st.ready_time.as_ref().map_or_else(|| "-".into(), clock);
    sheet.row("Node times", &format!("created {created}, ready {ready}"));
    sheet.cost(st.estimated_cost.as_ref());
    if let Some(spent) = &st.time_spent {
        sheet.row("Time spent", &spent.summary());
    }
    sheet.links(st.links.as_ref(), logs_cmd);
}

/// The slice's preemptions, maintenance restarts and slices replaced alone; `None` if none.
fn interruptions(st: &TpuSliceStatus) -> Option<String> {
    let replaced: i32 = st.slice_restarts.iter().sum();
    if st.recreations + st.maintenance_restarts + replaced == 0 {
        return None;
    }
    let mut counts = format!(
        "{} preemption(s), {} maintenance restart(s)",
        st.recreations, st.maintenance_restarts
    );
    if replaced > 0 {
        counts.push_str(&format!(
            ", slices replaced alone {:?} (by slice id)",
            st.slice_restarts
        ));
    }
    Some(counts)
}

pub fn batch(sheet: &mut Sheet, b: &PreprocessBatch, logs_cmd: &str) {
    let st = b.status.clone().unwrap_or_default();
    header(sheet, b, "ppb");
    sheet.phase(&format!("{:?}", st.phase), &st.conditions, st.message.as_deref());
    let finished = matches!(
        st.phase,
        PreprocessBatchPhase::Succeeded | PreprocessBatchPhase::Failed | PreprocessBatchPhase::Cancelled
    );
    sheet.waits_for(finished, &st.conditions, None);
    let batch = match &st.batch_name {
        Some(n) => format!("{n} ({})", st.batch_state.as_deref().unwrap_or("-")),
        None => "none yet".into(),
    };
    sheet.row("Batch", &batch);
    sheet.row(
        "Attempts",
        &format!("{} ({} earlier batches)", st.attempts, st.previous_batches.len()),
    );
    sheet.row("Run", &span(st.start_time.as_ref(), st.completion_time.as_ref()));
    if let Some(out) = &st.output_uri {
        sheet.row("Output", out);
    }
    sheet.cost(st.estimated_cost.as_ref());
    sheet.links(st.links.as_ref(), logs_cmd);
}

/// The newest checkpoint: step, where, when it was written.
fn checkpoint(ckpt: CheckpointStatus) -> String {
    match (&ckpt.latest_uri, ckpt.latest_step, &ckpt.latest_time) {
        (Some(uri), step, time) => {
            let step = step.map(|s| format!("step {s}, ")).unwrap_or_default();
            let at = time
                .as_ref()
                .map(|t| format!(" (written {})", stamp(t)))
                .unwrap_or_default();
            format!("{step}{uri}{at}")
        }
        _ => match &ckpt.dir {
            Some(dir) => format!("none yet in {dir}"),
            None => "none".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A multislice whose slice 2 was replaced alone says so, by slice id, beside preemptions and
    /// maintenance restarts.
    #[test]
    fn a_slice_replaced_alone_shows_in_interrupted() {
        let mut slice: TpuSlice = serde_json::from_value(serde_json::json!({
            "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuSlice",
            "metadata": {"name": "ms", "namespace": "default"},
            "spec": {"zone": "us-central2-b", "acceleratorType": "v4-16",
                     "runtimeVersion": "tpu-ubuntu2204-base", "multislice": {"nodeCount": 4}}
        }))
        .unwrap();
        slice.status = Some(tpu_operator_api::tpu_slice::TpuSliceStatus {
            slice_restarts: vec![0, 0, 1],
            ..Default::default()
        });
        let mut sheet = Sheet::default();
        super::slice(&mut sheet, &slice, "logs");
        let text = sheet.render();
        assert!(
            text.contains("Interrupted: 0 preemption(s), 0 maintenance restart(s), slices replaced alone [0, 0, 1] (by slice id)"),
            "{text}"
        );
    }
}
