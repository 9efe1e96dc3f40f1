//! The simulated workload of a READY node: checkpoints under its `CHECKPOINT_DIR` every
//! `workloadCheckpoint` while it runs (each at the step it has reached, `crate::training`), its
//! logs, then its `_SUCCESS` marker.

use super::*;

pub(super) fn maybe_schedule_workload(w: &mut Cloud, tpu: &mut Tpu, name: &str) {
    let Some(rec) = tpu.nodes.get(name) else { return };
    if rec.workload_done
        || rec.workload_timer.is_some()
        || rec.run.paused.is_some()
        || under_maintenance(rec)
        || rec.body["metadata"][DONE_URI_KEY].as_str().is_none()
    {
        return;
    }
    let script = rec.body["metadata"]["startup-script"]
        .as_str()
        .unwrap_or_default();
    let Some(env) = container_env(script, &rec.body["metadata"]) else {
        // The script still waits for a metadata attribute (a multislice node before the
        // operator told it its slice id): the container has not started.
        return;
    };
    let end = Cloud::add(w.now, w.cfg.durations.tpu_workload);
    // It resumes from the newest complete checkpoint (a node recreated after a preemption).
    let s0 = checkpoint_dir(tpu, name).map_or(0, |dir| committed_step(w, &dir));
    if let Some(rec) = tpu.nodes.get_mut(name) {
        rec.workload_end = Some(end);
        rec.workload_env = Some(env);
        rec.run.progress = Some(Progress { t0: w.now, s0 });
    }
    workload_log(w, tpu, name, INFO, "Workload container started");
    schedule_workload_step(w, tpu, name);
}

/// A line of the node's workload container on every host, as docker's `gcplogs` driver writes
/// it (when the startup script uses it: `logging::workloads`).
pub(super) fn workload_log(w: &mut Cloud, tpu: &Tpu, name: &str, severity: i32, text: &str) {
    if !w.cfg.simulate_outputs {
        return;
    }
    let Some(rec) = tpu.nodes.get(name) else { return };
    let Some(script) = rec.body["metadata"]["startup-script"].as_str() else {
        return;
    };
    let hosts = rec.body["networkEndpoints"].as_array().map_or(1, Vec::len);
    let script = script.to_string();
    crate::logging::workloads::workload(w, name, &script, hosts, severity, text);
}

/// The workload's next event: its next checkpoint, or its exit when that comes first (or when
/// it writes no checkpoints).
pub(super) fn schedule_workload_step(w: &mut Cloud, tpu: &mut Tpu, name: &str) {
    let Some(end) = tpu.nodes.get(name).and_then(|r| r.workload_end) else {
        return;
    };
    let every = w.cfg.durations.workload_checkpoint;
    let at = if every.is_zero() || checkpoint_dir(tpu, name).is_none() {
        end
    } else {
        Cloud::add(w.now, every).min(end)
    };
    let t = w.schedule(at, TimerKind::NodeWorkload, name);
    if let Some(rec) = tpu.nodes.get_mut(name) {
        rec.workload_timer = Some(t);
    }
}

/// The environment a startup script in the operator's format (`docker run ... -e 'K=V' ...`)
/// gives its container, read the way the shell would run it on the VM: `-e 'K=V'` words
/// (single-quoted, `'\''` for a quote), and `-e K` words passing through a variable the script
/// exported from instance metadata (`export K=$(attr KEY)`, the metadata server's
/// `instance/attributes/KEY`). `None` while an exported attribute is missing: the script waits
/// for it (`until [ -n "$(attr KEY)" ] ...`) before it starts the container. A script
/// without `docker run` gives an empty environment.
pub(crate) fn container_env(
    script: &str,
    metadata: &Value,
) -> Option<std::collections::BTreeMap<String, String>> {
    let mut exported = std::collections::BTreeMap::new();
    for line in script.lines() {
        let Some(rest) = line.trim().strip_prefix("export ") else {
            continue;
        };
        let Some((var, value)) = rest.split_once('=') else {
            continue;
        };
        let Some(key) = value.strip_prefix("$(attr ").and_then(|v| v.strip_suffix(')')) else {
            continue;
        };
        exported.insert(var.to_string(), metadata[key].as_str()?.to_string());
    }
    let mut env = std::collections::BTreeMap::new();
    let Some(run) = script.find("docker run ") else {
        return Some(env);
    };
    let words = shell_words(&script[run..]);
    let mut it = words.iter();
    while let Some(word) = it.next() {
        if word != "-e" {
            continue;
        }
        let Some(arg) = it.next() else { break };
        match arg.split_once('=') {
            Some((k, v)) => env.insert(k.to_string(), v.to_string()),
            None => env.insert(arg.clone(), exported.get(arg).cloned().unwrap_or_default()),
        };
    }
    Some(env)
}

/// The words of a shell command line up to its end (`\` line continuations joined), with
/// single quotes removed as the shell does.
fn shell_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(escaped) => {
                    in_word = true;
                    word.push(escaped);
                }
            },
            '\n' => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The `CHECKPOINT_DIR` the node's startup script passes to its container (`-e
/// 'CHECKPOINT_DIR=gs://…'`, the operator's `docker run` line), ending in `/`.
pub(super) fn checkpoint_dir(tpu: &Tpu, name: &str) -> Option<String> {
    checkpoint_dir_in(tpu.nodes.get(name)?.body["metadata"]["startup-script"].as_str()?)
}

/// A periodic checkpoint: at the step the workload has reached (a step already complete in
/// its directory, e.g. written by another slice of the same run, is not written again).
fn write_checkpoint(w: &mut Cloud, tpu: &mut Tpu, name: &str) {
    let Some(progress) = tpu.nodes.get(name).and_then(|r| r.run.progress) else {
        return;
    };
    let step = progress.step_at(w.now, w.cfg.durations.workload_checkpoint);
    if let Some(dir) = checkpoint_dir(tpu, name)
        && write_checkpoint_at(w, &dir, step)
    {
        let line = format!("step {step}: checkpoint saved to {dir}{step}/");
        workload_log(w, tpu, name, INFO, &line);
    }
}

/// The simulated training container: a checkpoint while it runs, then its exit, `_SUCCESS` (or
/// `_FAILED` with exit code 1).
pub fn fire_workload(w: &mut Cloud, tpu: &mut Tpu, seq: u64, name: &str) {
    let Some(rec) = tpu.nodes.get_mut(name) else {
        return;
    };
    if rec.workload_timer != Some(seq) || rec.state() != "READY" {
        return;
    }
    rec.workload_timer = None;
    let ended = rec.workload_end.is_none_or(|end| w.now >= end);
    if !ended {
        if w.cfg.simulate_outputs && !name_matches(&w.faults.suppressed_outputs, name) {
            write_checkpoint(w, tpu, name);
        }
        schedule_workload_step(w, tpu, name);
        return;
    }
    rec.workload_done = true;
    rec.run.progress = None;
    let uri = rec.body["metadata"][DONE_URI_KEY]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let failed = crate::faults::matching(&w.faults.failing_workloads, name).copied();
    let error = crate::faults::matching(&w.faults.messages, name).cloned();
    for (severity, line) in crate::logging::workloads::exit_lines(failed, error.as_deref()) {
        workload_log(w, tpu, name, severity, &line);
    }
    if name_matches(&w.faults.suppressed_outputs, name) || !w.cfg.simulate_outputs {
        return;
    }
    crate::outputs::tpu_workload_done(w, &uri, failed);
}
