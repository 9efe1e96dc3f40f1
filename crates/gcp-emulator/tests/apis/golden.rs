//! Conformance: replays the requests of the real-GCP recordings in `tests/golden/` (copied from
//! `shared/gcp-api/golden/`, recorded by Config Connector against real Google Cloud) against the
//! emulator and compares status codes and response bodies field by field after normalising
//! volatile values. The differences that remain are pinned in `KNOWN_DIFFERENCES` (each with its
//! reason, also listed in the crate README): a new difference, or a known one disappearing, fails.

use crate::common;

use common::*;
use serde_json::Value;
use std::collections::BTreeSet;

const PROJECT: &str = "golden-proj";
const UNIQUE: &str = "u1a2b3";

/// (log, path in the normalised body, kind) -> reason. Paths use `/` between keys and `[i]`.
const KNOWN_DIFFERENCES: &[(&str, &str, &str)] = &[
    // Dataproc: KCC's normaliser drops these volatile fields from its recording; the emulator
    // serves them as the v1 Batch / BatchOperationMetadata schemas define them.
    (
        "dataproc/batch-minimal",
        "#1 POST batches: metadata/batchUuid",
        "extra",
    ),
    (
        "dataproc/batch-minimal",
        "#1 POST batches: metadata/doneTime",
        "missing",
    ),
    (
        "dataproc/batch-minimal",
        "#2 GET operations: metadata/batchUuid",
        "extra",
    ),
    (
        "dataproc/batch-minimal",
        "#2 GET operations: response/creator",
        "extra",
    ),
    (
        "dataproc/batch-minimal",
        "#2 GET operations: response/operation",
        "extra",
    ),
    (
        "dataproc/batch-minimal",
        "#2 GET operations: response/uuid",
        "extra",
    ),
    (
        "dataproc/batch-minimal",
        "#2 GET operations: response/runtimeInfo/endpoints",
        "extra",
    ),
    (
        "dataproc/batch-minimal",
        "#2 GET operations: response/runtimeInfo/approximateUsage/milliDcuSeconds",
        "differs",
    ),
    (
        "dataproc/batch-minimal",
        "#2 GET operations: response/runtimeInfo/approximateUsage/shuffleStorageGbSeconds",
        "differs",
    ),
    ("dataproc/batch-minimal", "#3 GET batches: creator", "extra"),
    ("dataproc/batch-minimal", "#3 GET batches: operation", "extra"),
    ("dataproc/batch-minimal", "#3 GET batches: uuid", "extra"),
    (
        "dataproc/batch-minimal",
        "#3 GET batches: runtimeInfo/endpoints",
        "extra",
    ),
    (
        "dataproc/batch-minimal",
        "#3 GET batches: runtimeInfo/approximateUsage/milliDcuSeconds",
        "differs",
    ),
    (
        "dataproc/batch-minimal",
        "#3 GET batches: runtimeInfo/approximateUsage/shuffleStorageGbSeconds",
        "differs",
    ),
    // The recorded GET shows only one stateHistory entry (PENDING) after the op response showed
    // two; the emulator keeps the full history on both reads.
    ("dataproc/batch-minimal", "#3 GET batches: stateHistory", "length"),
    // Storage: hierarchical-namespace folders are not emulated (folder calls are skipped), so the
    // listing that real GCS answers with folder prefixes is empty here.
    ("storage/folder-crud", "#4 GET o: prefixes", "missing"),
];

struct Entry {
    method: String,
    url: String,
    body: String,
    status: u16,
    resp: String,
}

fn parse_log(text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for chunk in text.split("\n---\n") {
        let lines: Vec<&str> = chunk.trim_matches('\n').lines().collect();
        let Some(first) = lines.first() else { continue };
        if first.starts_with("GRPC") {
            continue;
        }
        let (method, url) = first.split_once(' ').expect("request line");
        let mut i = 1;
        while i < lines.len() && !lines[i].is_empty() {
            i += 1;
        }
        let status_at = (i..lines.len())
            .find(|&j| {
                let l = lines[j];
                l.len() > 4 && l.as_bytes()[..3].iter().all(u8::is_ascii_digit) && l.as_bytes()[3] == b' '
            })
            .expect("status line");
        let body = lines[i..status_at].join("\n").trim().to_string();
        let status: u16 = lines[status_at][..3].parse().unwrap();
        let mut k = status_at + 1;
        while k < lines.len() && !lines[k].is_empty() {
            k += 1;
        }
        let resp = lines
            .get(k..)
            .map(|l| l.join("\n"))
            .unwrap_or_default()
            .trim()
            .to_string();
        out.push(Entry {
            method: method.into(),
            url: url.into(),
            body,
            status,
            resp,
        });
    }
    out
}

/// Real host + version -> emulator prefix.
fn map_url(url: &str, base: &str) -> Option<String> {
    let maps = [
        ("https://tpu.googleapis.com/v2/", "/tpu/v2/"),
        ("https://dataproc.googleapis.com/v1/", "/dataproc/v1/"),
        (
            "https://us-central1-aiplatform.googleapis.com/v1beta1/",
            "/vertex/v1/",
        ),
        ("https://storage.googleapis.com/storage/v1/", "/storage/v1/"),
    ];
    maps.iter()
        .find_map(|(from, to)| url.strip_prefix(from).map(|rest| format!("{base}{to}{rest}")))
}

struct Ctx {
    number: String,
    op_ids: Vec<String>,
}

impl Ctx {
    fn fill(&self, s: &str) -> String {
        let mut s = s
            .replace("${projectId}", PROJECT)
            .replace("${uniqueId}", UNIQUE)
            .replace("${projectNumber}", &self.number);
        if let Some(op) = self.op_ids.last() {
            s = s.replace("${operationID}", op);
        }
        s
    }
}

fn is_timestamp(s: &str) -> bool {
    s.len() >= 20
        && s.as_bytes()[4] == b'-'
        && s.as_bytes()[10] == b'T'
        && chrono::DateTime::parse_from_rfc3339(s).is_ok()
}

fn norm(v: &mut Value, key: &str, ctx: &Ctx) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                norm(x, k, ctx);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| norm(x, key, ctx)),
        Value::String(s) => {
            let fixed = match key {
                // KCC's normaliser replaces every `id` (node ids, bucket ids) with this placeholder.
                "id" => Some("000000000000000000000"),
                "etag" => Some("abcdef0123A="),
                "generation" => Some("12345678901234"),
                "ipAddress" => Some("10.20.30.40"),
                "externalIp" => Some("8.8.8.8"),
                "cidrBlock" => Some("10.20.30.0/24"),
                "outputUri" => Some("<volatile>"),
                "goog-dataproc-batch-uuid" => Some(""),
                "goog-dataproc-drz-resource-uuid" => Some("batch-"),
                "uuid" | "batchUuid" => Some("<uuid>"),
                _ => None,
            };
            if let Some(f) = fixed {
                *s = f.to_string();
                return;
            }
            if is_timestamp(s) {
                *s = "2024-04-01T12:34:56.123456Z".into();
                return;
            }
            let mut t = s
                .replace(PROJECT, "${projectId}")
                .replace(&ctx.number, "${projectNumber}")
                .replace(UNIQUE, "${uniqueId}");
            for op in &ctx.op_ids {
                t = t.replace(op, "${operationID}");
            }
            if let Some(at) = t.find("customJobs/") {
                let (head, tail) = t.split_at(at + "customJobs/".len());
                if tail.chars().all(|c| c.is_ascii_digit()) && !tail.is_empty() {
                    t = format!("{head}${{customJobId}}");
                }
            }
            *s = t;
        }
        _ => {}
    }
}

fn diff(path: &str, g: &Value, e: &Value, out: &mut Vec<(String, String, String)>) {
    match (g, e) {
        (Value::Object(gm), Value::Object(em)) => {
            for (k, gv) in gm {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}/{k}")
                };
                match em.get(k) {
                    None => out.push((p, "missing".into(), format!("golden {gv}"))),
                    Some(ev) => diff(&p, gv, ev, out),
                }
            }
            for (k, ev) in em {
                if !gm.contains_key(k) {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}/{k}")
                    };
                    out.push((p, "extra".into(), format!("emulator {ev}")));
                }
            }
        }
        (Value::Array(ga), Value::Array(ea)) if ga.len() != ea.len() => out.push((
            path.into(),
            "length".into(),
            format!("golden {} vs emulator {}", ga.len(), ea.len()),
        )),
        (Value::Array(ga), Value::Array(ea)) => {
            for (i, (gv, ev)) in ga.iter().zip(ea).enumerate() {
                diff(&format!("{path}[{i}]"), gv, ev, out);
            }
        }
        _ if g != e => out.push((
            path.into(),
            "differs".into(),
            format!("golden {g} vs emulator {e}"),
        )),
        _ => {}
    }
}

async fn replay(log: &str, emu: &gcp_emulator::Emulator) -> Vec<(String, String, String, String)> {
    let text = std::fs::read_to_string(format!(
        "{}/tests/golden/{log}.http.log",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let mut ctx = Ctx {
        number: emu.config().project_number(PROJECT).to_string(),
        op_ids: vec![],
    };
    let client = reqwest::Client::new();
    let mut found = Vec::new();
    for (i, e) in parse_log(&text).into_iter().enumerate() {
        // Folders (hierarchical namespace) are not emulated.
        if e.url.contains("/folders") {
            continue;
        }
        let Some(url) = map_url(&ctx.fill(&e.url), &emu.url()) else {
            continue;
        };
        if e.method == "GET" && url.contains("/operations/") {
            // KCC drops polls that are not done: let the emulated operation finish first.
            emu.clock().advance(secs(86_400));
        }
        let mut req = client.request(e.method.parse().unwrap(), &url);
        if !e.body.is_empty() {
            req = req
                .header("content-type", "application/json")
                .body(ctx.fill(&e.body));
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let mut got: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if let Some(op) = got["name"].as_str().filter(|n| n.contains("/operations/")) {
            ctx.op_ids.push(op.rsplit('/').next().unwrap().to_string());
        }
        let coll = url
            .split('?')
            .next()
            .unwrap()
            .split('/')
            .rev()
            .find(|s| ["nodes", "operations", "batches", "customJobs", "b", "o"].contains(s));
        let label = format!("#{i} {} {}", e.method, coll.unwrap_or("?"));
        if status != e.status {
            found.push((
                log.to_string(),
                format!("{label}: <status>"),
                "differs".into(),
                format!("golden {} vs emulator {status}: {text}", e.status),
            ));
            continue;
        }
        let mut want: Value = if e.resp.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&e.resp).unwrap()
        };
        norm(&mut want, "", &ctx);
        norm(&mut got, "", &ctx);
        let mut d = Vec::new();
        diff("", &want, &got, &mut d);
        for (p, kind, detail) in d {
            found.push((log.to_string(), format!("{label}: {p}"), kind, detail));
        }
    }
    found
}

#[tokio::test]
async fn golden_logs_match_except_for_known_differences() {
    let mut all = Vec::new();
    for log in [
        "tpu/node-crud",
        "dataproc/batch-minimal",
        "vertex/customjob-minimal",
        "vertex/pipelinejob-minimal",
        "storage/folder-crud",
    ] {
        let emu = emulator().await;
        all.extend(replay(log, &emu).await);
        emu.shutdown().await;
    }
    let found: BTreeSet<(String, String, String)> = all
        .iter()
        .map(|(l, p, k, _)| (l.clone(), p.clone(), k.clone()))
        .collect();
    let known: BTreeSet<(String, String, String)> = KNOWN_DIFFERENCES
        .iter()
        .map(|(l, p, k)| (l.to_string(), p.to_string(), k.to_string()))
        .collect();
    let report: Vec<String> =
        all.iter()
            .filter(|(l, p, k, _)| !known.contains(&(l.clone(), p.clone(), k.clone())))
            .map(|(l, p, k, d)| format!("NEW  {l} {p} [{k}] {d}"))
            .chain(known.difference(&found).map(|(l, p, k)| {
                format!("GONE {l} {p} [{k}] (remove from KNOWN_DIFFERENCES and the README)")
            }))
            .collect();
    assert!(
        report.is_empty(),
        "golden differences changed:\n{}",
        report.join("\n")
    );
}

/// The entries of a `entries.list` reply without what changes from run to run (times, insert
/// ids): log, resource, severity, labels, payload.
fn logged(reply: &Value) -> Vec<Value> {
    reply["entries"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    serde_json::json!([
                        e["logName"],
                        e["resource"],
                        e["severity"],
                        e["labels"],
                        e["textPayload"],
                        e["jsonPayload"]
                    ])
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Issue 36 item 4: what Google's Python Cloud Logging client (REST transport) sent to the
/// emulator and got back (`golden/logging/python-client.json`, recorded by
/// `scripts/record-logging-python.py`, which also checked the client understood every reply)
/// replays with the same statuses, entries and paging: snake_case request fields, the
/// client's `+0000` times in filters, `severity>=ERROR`, `timestamp desc`, page tokens.
#[tokio::test]
async fn python_logging_client_recording_replays() {
    let recording: Value =
        serde_json::from_str(include_str!("../golden/logging/python-client.json")).unwrap();
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    // After the recording: the client's default filter keeps the last 24 hours.
    let now = chrono::DateTime::parse_from_rfc3339("2026-11-26T06:00:00Z")
        .unwrap()
        .to_utc();
    let emu = gcp_emulator::Emulator::builder()
        .manual_clock(now)
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let mut token = Value::Null;
    let calls = recording["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 7, "two writes, five lists");
    for (i, call) in calls.iter().enumerate() {
        let mut request = call["request"].clone();
        if request.get("pageToken").is_some() {
            request["pageToken"] = token.clone();
        }
        let url = format!(
            "{}{}",
            emu.url().trim_end_matches('/'),
            call["path"].as_str().unwrap()
        );
        let reply = http.post(url).json(&request).send().await.unwrap();
        assert_eq!(
            reply.status().as_u16(),
            call["status"].as_u64().unwrap() as u16,
            "call {i}"
        );
        let body: Value = reply.json().await.unwrap();
        assert_eq!(logged(&body), logged(&call["response"]), "call {i}: {body}");
        assert_eq!(
            body.get("nextPageToken").is_some(),
            call["response"].get("nextPageToken").is_some(),
            "call {i}: {body}"
        );
        token = body.get("nextPageToken").cloned().unwrap_or(Value::Null);
    }
}
