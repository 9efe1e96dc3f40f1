//! Cloud Storage JSON API and the admin API over HTTP (plain reqwest: the official storage
//! client's list/get calls are gRPC, so the operator uses this JSON API directly).

use crate::common;

use common::*;
use gcp_emulator::Emulator;
use reqwest::Method;
use serde_json::json;

/// A media upload of `in/data.csv` auto-creates the bucket and returns the object's metadata.
async fn upload_media(c: &reqwest::Client, url: &str) {
    let r = c
        .post(format!(
            "{url}/upload/storage/v1/b/bkt/o?uploadType=media&name=in/data.csv"
        ))
        .header("content-type", "text/csv")
        .body("a,b\n1,2\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let m: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (m["kind"].as_str(), m["size"].as_str(), m["contentType"].as_str()),
        (Some("storage#object"), Some("8"), Some("text/csv"))
    );
    assert!(m["generation"].is_string() && m["md5Hash"].is_string() && m["crc32c"].is_string());
}

/// A multipart upload of `in/sub/blob.bin` keeps the name and custom metadata from its JSON part.
async fn upload_multipart(c: &reqwest::Client, url: &str) {
    let boundary = "xyzzy";
    let body = format!(
        "--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{}\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\nBINARY\r\n--{boundary}--\r\n",
        json!({"name": "in/sub/blob.bin", "metadata": {"k": "v"}})
    );
    let r = c
        .post(format!("{url}/upload/storage/v1/b/bkt/o?uploadType=multipart"))
        .header("content-type", format!("multipart/related; boundary={boundary}"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let m: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (
            m["name"].as_str(),
            m["size"].as_str(),
            m["metadata"]["k"].as_str()
        ),
        (Some("in/sub/blob.bin"), Some("6"), Some("v"))
    );
}

/// Both objects read back: metadata, media with its content type, and the download endpoint.
async fn assert_metadata_and_media(c: &reqwest::Client, url: &str) {
    let (s, meta) = raw(
        Method::GET,
        &format!("{url}/storage/v1/b/bkt/o/in%2Fdata.csv"),
        None,
    )
    .await;
    assert_eq!((s, meta["name"].as_str()), (200, Some("in/data.csv")));
    let media = c
        .get(format!("{url}/storage/v1/b/bkt/o/in%2Fdata.csv?alt=media"))
        .send()
        .await
        .unwrap();
    assert_eq!(media.headers()["content-type"], "text/csv");
    assert_eq!(media.text().await.unwrap(), "a,b\n1,2\n");
    let dl = c
        .get(format!(
            "{url}/download/storage/v1/b/bkt/o/in%2Fsub%2Fblob.bin?alt=media"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(dl.text().await.unwrap(), "BINARY");
}

/// `objects.list` groups by prefix + delimiter, pages with `maxResults`/`pageToken`, and an empty
/// listing is just the kind.
async fn assert_list_prefixes_and_pages(url: &str) {
    let (_, l) = raw(
        Method::GET,
        &format!("{url}/storage/v1/b/bkt/o?prefix=in/&delimiter=/"),
        None,
    )
    .await;
    assert_eq!(l["prefixes"], json!(["in/sub/"]));
    assert_eq!(l["items"].as_array().unwrap().len(), 1);
    let (_, p1) = raw(
        Method::GET,
        &format!("{url}/storage/v1/b/bkt/o?maxResults=1"),
        None,
    )
    .await;
    assert_eq!(p1["items"].as_array().unwrap().len(), 1);
    let tok = p1["nextPageToken"].as_str().expect("more pages");
    let (_, p2) = raw(
        Method::GET,
        &format!(
            "{url}/storage/v1/b/bkt/o?maxResults=1&pageToken={}",
            urlencoding::encode(tok)
        ),
        None,
    )
    .await;
    assert_eq!(p2["items"][0]["name"], "in/sub/blob.bin");
    assert!(p2.get("nextPageToken").is_none());
    let (_, none) = raw(
        Method::GET,
        &format!("{url}/storage/v1/b/bkt/o?prefix=nothing/"),
        None,
    )
    .await;
    assert_eq!(none, json!({"kind": "storage#objects"}));
}

/// `ifGenerationMatch=0` on an existing object is 412; delete is 204; then a missing object and a
/// missing bucket are 404 in the legacy error shape (no `status` for the bucket).
async fn assert_precondition_delete_and_errors(c: &reqwest::Client, url: &str) {
    let r = c
        .post(format!(
            "{url}/upload/storage/v1/b/bkt/o?uploadType=media&name=in/data.csv&ifGenerationMatch=0"
        ))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 412);
    let r = c
        .delete(format!("{url}/storage/v1/b/bkt/o/in%2Fdata.csv"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let (s, e) = raw(
        Method::GET,
        &format!("{url}/storage/v1/b/bkt/o/in%2Fdata.csv"),
        None,
    )
    .await;
    assert_eq!(s, 404);
    assert_eq!(
        e,
        json!({"error": {"code": 404, "message": "No such object: bkt/in/data.csv", "status": "NOT_FOUND",
                         "errors": [{"domain": "global", "message": "No such object: bkt/in/data.csv", "reason": "notFound"}]}})
    );
    let (s, e) = raw(Method::GET, &format!("{url}/storage/v1/b/missing/o"), None).await;
    assert_eq!(s, 404);
    assert_eq!(
        e["error"]["errors"][0]["message"],
        "The specified bucket does not exist."
    );
    assert!(e["error"].get("status").is_none());
}

#[tokio::test]
async fn objects_insert_get_list_delete() {
    let emu = emulator().await;
    let url = emu.url();
    let c = reqwest::Client::new();
    // media upload auto-creates the bucket
    upload_media(&c, &url).await;
    // multipart upload with metadata
    upload_multipart(&c, &url).await;
    // get metadata and media (name percent-encoded as one segment)
    assert_metadata_and_media(&c, &url).await;
    // list with prefix + delimiter, paging, empty listing
    assert_list_prefixes_and_pages(&url).await;
    // preconditions, delete, errors in the legacy shape
    assert_precondition_delete_and_errors(&c, &url).await;
    assert_eq!(emu.call_count("storage", "objects.insert"), 3);
}

#[tokio::test]
async fn buckets_insert_get_delete() {
    let emu = emulator().await;
    let url = emu.url();
    let (s, b) = raw(
        Method::POST,
        &format!("{url}/storage/v1/b?project=p"),
        Some(json!({"name": "bucket-1"})),
    )
    .await;
    assert_eq!(
        (s, b["kind"].as_str(), b["location"].as_str()),
        (200, Some("storage#bucket"), Some("US"))
    );
    let (s, e) = raw(
        Method::POST,
        &format!("{url}/storage/v1/b?project=p"),
        Some(json!({"name": "bucket-1"})),
    )
    .await;
    assert_eq!(
        (s, e["error"]["errors"][0]["reason"].as_str()),
        (409, Some("conflict"))
    );
    assert_eq!(
        raw(Method::GET, &format!("{url}/storage/v1/b/bucket-1"), None)
            .await
            .0,
        200
    );
    emu.put_object("bucket-1", "x", "1", "text/plain");
    assert_eq!(
        raw(Method::DELETE, &format!("{url}/storage/v1/b/bucket-1"), None)
            .await
            .0,
        409
    );
    assert_eq!(
        raw(Method::DELETE, &format!("{url}/storage/v1/b/bucket-1/o/x"), None)
            .await
            .0,
        204
    );
    assert_eq!(
        raw(Method::DELETE, &format!("{url}/storage/v1/b/bucket-1"), None)
            .await
            .0,
        204
    );
    assert_eq!(
        raw(Method::GET, &format!("{url}/storage/v1/b/bucket-1"), None)
            .await
            .0,
        404
    );
    emu.inject(gcp_emulator::Fault::FailCalls {
        service: "storage".into(),
        method: "objects.list".into(),
        count: 1,
        code: gcp_emulator::Code::PermissionDenied,
        message: None,
    })
    .unwrap();
    let (s, e) = raw(Method::GET, &format!("{url}/storage/v1/b/bucket-1/o"), None).await;
    assert_eq!(
        (s, e["error"]["errors"][0]["reason"].as_str()),
        (403, Some("forbidden"))
    );
}

/// The admin clock: manual at the start time; `clock:advance` moves a TPU node from CREATING to
/// READY; `clock:set` jumps to a given time.
async fn drive_the_clock(emu: &Emulator, a: &str, tpu: &str) {
    let (_, clock) = raw(Method::GET, &format!("{a}/clock"), None).await;
    assert_eq!(
        (clock["now"].as_str(), clock["manual"].as_bool()),
        (Some("2026-01-01T00:00:00.000000Z"), Some(true))
    );
    raw(
        Method::POST,
        &format!("{tpu}?nodeId=n1"),
        Some(json!({"runtimeVersion": "v", "acceleratorType": "v5p-8"})),
    )
    .await;
    let (_, r) = raw(Method::GET, &format!("{a}/resources?kind=tpu.node"), None).await;
    assert_eq!(r["resources"][0]["state"], "CREATING");
    let (s, c) = raw(
        Method::POST,
        &format!("{a}/clock:advance"),
        Some(json!({"duration": "3m"})),
    )
    .await;
    assert_eq!((s, c["now"].as_str()), (200, Some("2026-01-01T00:03:00.000000Z")));
    let (_, r) = raw(Method::GET, &format!("{a}/resources?kind=tpu.node"), None).await;
    assert_eq!(r["resources"][0]["state"], "READY");
    raw(
        Method::POST,
        &format!("{a}/clock:set"),
        Some(json!({"time": "2026-01-02T00:00:00Z"})),
    )
    .await;
    assert_eq!(emu.clock().now().to_rfc3339(), "2026-01-02T00:00:00+00:00");
}

/// Admin faults: `failCalls` fails the next `nodes.get`, a stockout is listed and refuses a
/// create, preempting an on-demand node is refused, and `DELETE /faults` clears them.
async fn inject_and_clear_faults(a: &str, tpu: &str) {
    let fault = json!({"kind": "failCalls", "service": "tpu", "method": "nodes.get", "count": 1, "code": "UNAVAILABLE"});
    assert_eq!(
        raw(Method::POST, &format!("{a}/faults"), Some(fault)).await.0,
        200
    );
    let (s, e) = raw(Method::GET, &format!("{tpu}/n1"), None).await;
    assert_eq!((s, e["error"]["status"].as_str()), (503, Some("UNAVAILABLE")));
    let stock = json!({"kind": "stockout", "zone": "us-central1-a", "accelerator": "v5p-8"});
    raw(Method::POST, &format!("{a}/faults"), Some(stock)).await;
    let (_, f) = raw(Method::GET, &format!("{a}/faults"), None).await;
    assert_eq!(f["stockouts"], json!([["us-central1-a", "v5p-8"]]));
    let (s, e) = raw(
        Method::POST,
        &format!("{tpu}?nodeId=n2"),
        Some(json!({"runtimeVersion": "v", "acceleratorType": "v5p-8"})),
    )
    .await;
    assert_eq!(
        (s, e["error"]["status"].as_str()),
        (429, Some("RESOURCE_EXHAUSTED"))
    );
    let (s, e) = raw(
        Method::POST,
        &format!("{a}/faults"),
        Some(json!({"kind": "preemptNode", "name": "projects/p/locations/us-central1-a/nodes/n1"})),
    )
    .await;
    assert_eq!(
        (s, e["error"]["status"].as_str()),
        (400, Some("FAILED_PRECONDITION"))
    );
    assert_eq!(raw(Method::DELETE, &format!("{a}/faults"), None).await.0, 200);
}

/// The admin call log lists the failed `nodes.get`, and `calls:counts` counts both creates.
async fn assert_call_log(a: &str) {
    let (_, calls) = raw(
        Method::GET,
        &format!("{a}/calls?service=tpu&method=nodes.get"),
        None,
    )
    .await;
    assert_eq!(calls["calls"].as_array().unwrap().len(), 1);
    assert_eq!(calls["calls"][0]["status"], 503);
    let (_, counts) = raw(Method::GET, &format!("{a}/calls:counts"), None).await;
    assert_eq!(counts["counts"]["tpu.nodes.create"], 2);
}

/// The admin state API: a bucket made through it, an object's listing and content, and the node.
async fn inspect_state(emu: &Emulator, a: &str) {
    let (s, b) = raw(
        Method::POST,
        &format!("{a}/buckets"),
        Some(json!({"name": "pre-made"})),
    )
    .await;
    assert_eq!((s, b["name"].as_str()), (200, Some("pre-made")));
    emu.put_object("pre-made", "dir/file.txt", "hello", "text/plain");
    let (_, objs) = raw(Method::GET, &format!("{a}/buckets/pre-made/objects"), None).await;
    assert_eq!(objs["items"][0]["name"], "dir/file.txt");
    let (_, content) = raw(
        Method::GET,
        &format!("{a}/buckets/pre-made/objects/dir%2Ffile.txt"),
        None,
    )
    .await;
    assert_eq!(content, json!("hello"));
    let (_, nodes) = raw(Method::GET, &format!("{a}/nodes"), None).await;
    assert_eq!(nodes["items"].as_array().unwrap().len(), 1);
}

/// `GET /config` shows the durations and `PUT /config` changes them in the running emulator.
async fn replace_config(emu: &Emulator, a: &str) {
    let (_, cfg) = raw(Method::GET, &format!("{a}/config"), None).await;
    assert_eq!(cfg["durations"]["tpuCreate"], "3m");
    let mut new_cfg = cfg.clone();
    new_cfg["durations"]["tpuCreate"] = json!("10s");
    assert_eq!(
        raw(Method::PUT, &format!("{a}/config"), Some(new_cfg)).await.0,
        200
    );
    assert_eq!(emu.config().durations.tpu_create, secs(10));
}

#[tokio::test]
async fn admin_api_drives_clock_faults_calls_state_and_reset() {
    let emu = emulator().await;
    let a = format!("{}/emulator/v1", emu.url());
    let tpu = format!("{}/tpu/v2/projects/p/locations/us-central1-a/nodes", emu.url());
    drive_the_clock(&emu, &a, &tpu).await;
    inject_and_clear_faults(&a, &tpu).await;
    assert_call_log(&a).await;
    inspect_state(&emu, &a).await;
    replace_config(&emu, &a).await;

    assert_eq!(raw(Method::POST, &format!("{a}/reset"), None).await.0, 200);
    assert!(emu.list_resources().is_empty());
    assert!(emu.calls().len() <= 1, "reset clears the call log");
    assert_eq!(raw(Method::GET, &format!("{a}/nope"), None).await.0, 404);
}

#[tokio::test]
async fn concurrent_keep_alive_connections_are_served() {
    let emu = emulator().await;
    let c = reqwest::Client::new();
    let url = format!("{}/tpu/v2/projects/p/locations/us-central1-a/nodes", emu.url());
    let calls = (0..64).map(|_| {
        let (c, url) = (c.clone(), url.clone());
        tokio::spawn(async move { c.get(url).send().await.unwrap().status().as_u16() })
    });
    for r in futures::future::join_all(calls).await {
        assert_eq!(r.unwrap(), 200);
    }
    assert_eq!(emu.call_count("tpu", "nodes.list"), 64);
}
