//! Impersonation of a namespace's Google service account against gcp-emulator's IAM: tokens are
//! minted by the operator's principal, cached per account until near expiry (what one namespace
//! costs in `generateAccessToken` calls per hour), refused with a message naming the account and
//! the role to grant, and storage calls act as the account.

use std::{sync::Arc, time::Duration};

use gcp_emulator::Emulator;
use tpu_operator_gcp::{ErrorKind, Gcp, GcpConfig, GcpMetrics, Service};

const OPERATOR: &str = "tpu-operator@platform.iam.gserviceaccount.com";
const TEAM_A: &str = "team-a@team-a-proj.iam.gserviceaccount.com";
const TEAM_B: &str = "team-b@team-b-proj.iam.gserviceaccount.com";

async fn env() -> (Emulator, Gcp) {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let start = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let emu = Emulator::builder().manual_clock(start).start().await.unwrap();
    let gcp = Gcp::connect(GcpConfig::emulator(emu.url().parse().unwrap()), GcpMetrics::new())
        .await
        .unwrap();
    let clock = emu.clock();
    gcp.impersonation.set_clock(Arc::new(move || clock.now()));
    emu.set_default_principal(OPERATOR);
    emu.grant_token_creator(TEAM_A, OPERATOR);
    emu.grant_bucket("team-a-data", "roles/storage.objectViewer", TEAM_A)
        .unwrap();
    emu.grant_bucket("team-b-data", "roles/storage.objectViewer", TEAM_B)
        .unwrap();
    emu.put_object("team-a-data", "raw/part-0", "a", "text/plain");
    emu.put_object("team-b-data", "raw/part-0", "b", "text/plain");
    (emu, gcp)
}

/// The token cache's cost: a namespace whose objects read Cloud Storage every 30 s of cloud time
/// for a day mints one token per 55 minutes (3600 s lifetime, replaced 300 s before expiry):
/// 27 tokens in 24 h, 1.1 per namespace per hour, whatever the read rate.
#[tokio::test]
async fn one_namespace_costs_about_one_token_an_hour() {
    let (emu, gcp) = env().await;
    let storage = gcp.storage_as(Some(TEAM_A));
    let hours = 24;
    for _ in 0..hours * 120 {
        assert!(storage.prefix_exists("gs://team-a-data/raw/").await.unwrap());
        emu.clock().advance(Duration::from_secs(30));
    }
    let minted = emu.tokens_minted(TEAM_A);
    assert_eq!(minted, gcp.impersonation.minted(TEAM_A));
    println!(
        "tokens minted for one namespace: {minted} in {hours} h of reads every 30 s ({:.2}/h)",
        minted as f64 / hours as f64
    );
    assert_eq!(minted, 27);
    let reads = emu.call_count("storage", "objects.list");
    assert_eq!(reads, hours * 120);
    assert!(
        emu.calls()
            .iter()
            .all(|c| c.service != "storage" || c.principal == TEAM_A)
    );
}

/// Concurrent first reads of one namespace share one mint.
#[tokio::test]
async fn concurrent_reads_share_one_token() {
    let (emu, gcp) = env().await;
    let storage = gcp.storage_as(Some(TEAM_A));
    let mut reads = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let storage = storage.clone();
        reads.spawn(async move { storage.prefix_exists("gs://team-a-data/raw/").await });
    }
    while let Some(r) = reads.join_next().await {
        assert!(r.unwrap().unwrap());
    }
    assert_eq!(emu.tokens_minted(TEAM_A), 1);
}

/// Team-a's identity is refused team-b's bucket (the error names the identity), and an account
/// the operator may not impersonate is refused with the role to grant.
#[tokio::test]
async fn refusals_name_the_identity() {
    let (_emu, gcp) = env().await;
    let err = gcp
        .storage_as(Some(TEAM_A))
        .prefix_exists("gs://team-b-data/raw/")
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::PermissionDenied);
    assert_eq!(err.identity.as_deref().map(String::as_str), Some(TEAM_A));
    assert!(err.message.starts_with(TEAM_A), "{err}");

    // An account with no token creator bound can be minted (open until bound, like a bucket),
    // but its token reaches no bucket bound to others.
    let err = gcp
        .storage_as(Some("intruder@x-proj.iam.gserviceaccount.com"))
        .prefix_exists("gs://team-a-data/raw/")
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind, err.service),
        (ErrorKind::PermissionDenied, Service::Storage)
    );
    let (emu, gcp) = env().await;
    emu.grant_token_creator(TEAM_B, "someone-else@p.iam.gserviceaccount.com");
    let err = gcp
        .storage_as(Some(TEAM_B))
        .prefix_exists("gs://team-b-data/raw/")
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind, err.service),
        (ErrorKind::PermissionDenied, Service::Iam)
    );
    assert_eq!(err.identity.as_deref().map(String::as_str), Some(TEAM_B));
    assert!(
        err.message.contains("roles/iam.serviceAccountTokenCreator") && err.message.contains(TEAM_B),
        "{err}"
    );
}
