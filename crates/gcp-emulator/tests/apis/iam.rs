//! IAM per identity over HTTP: `generateAccessToken` through the admin API's bindings, storage
//! requests authorized by the bearer token's principal, the principal recorded on every call,
//! and 403s in Google's shapes.

use crate::common;

use common::*;
use serde_json::{Value, json};

const OPERATOR: &str = "tpu-operator@platform.iam.gserviceaccount.com";
const TEAM_A: &str = "team-a@platform.iam.gserviceaccount.com";

async fn mint(c: &reqwest::Client, url: &str, sa: &str, bearer: Option<&str>) -> (u16, Value) {
    let mut r = c
        .post(format!(
            "{url}/iamcredentials/v1/projects/-/serviceAccounts/{sa}:generateAccessToken"
        ))
        .json(&json!({"scope": ["https://www.googleapis.com/auth/cloud-platform"], "lifetime": "3600s"}));
    if let Some(t) = bearer {
        r = r.bearer_auth(t);
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn list(c: &reqwest::Client, url: &str, bucket: &str, token: &str) -> (u16, Value) {
    let r = c
        .get(format!("{url}/storage/v1/b/{bucket}/o?prefix=ckpt/"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn tokens_act_as_their_account_and_bound_buckets_refuse_other_principals() {
    let emu = emulator().await;
    let (url, c) = (emu.url(), reqwest::Client::new());
    let admin = format!("{url}/emulator/v1/iam");
    let put = c
        .put(format!("{admin}/defaultPrincipal"))
        .json(&json!({"principal": OPERATOR}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    for (path, body) in [
        (
            "tokenCreators",
            json!({"serviceAccount": TEAM_A, "member": format!("serviceAccount:{OPERATOR}")}),
        ),
        (
            "bucketBindings",
            json!({"bucket": "team-a-data", "role": "roles/storage.objectViewer", "member": format!("serviceAccount:{TEAM_A}")}),
        ),
        (
            "bucketBindings",
            json!({"bucket": "team-b-data", "role": "roles/storage.objectViewer", "member": "serviceAccount:team-b@platform.iam.gserviceaccount.com"}),
        ),
    ] {
        let r = c
            .post(format!("{admin}/{path}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    emu.put_object("team-a-data", "ckpt/1", "x", "text/plain");
    emu.put_object("team-b-data", "ckpt/9000", "x", "text/plain");

    // The operator (no token) mints team-a's token; team-a cannot mint one for itself... nor
    // can anyone but the operator.
    let (status, minted) = mint(&c, &url, TEAM_A, None).await;
    assert_eq!(status, 200, "{minted}");
    let token = minted["accessToken"].as_str().unwrap().to_string();
    assert_eq!(minted["expireTime"], "2026-01-01T01:00:00.000000Z");
    let (status, denied) = mint(&c, &url, TEAM_A, Some(&token)).await;
    assert_eq!(
        (status, &denied["error"]["status"]),
        (403, &json!("PERMISSION_DENIED"))
    );
    assert_eq!(denied["error"]["details"][0]["reason"], "IAM_PERMISSION_DENIED");

    let (status, own) = list(&c, &url, "team-a-data", &token).await;
    assert_eq!((status, own["items"][0]["name"].as_str()), (200, Some("ckpt/1")));
    let (status, theirs) = list(&c, &url, "team-b-data", &token).await;
    assert_eq!(status, 403, "{theirs}");
    assert_eq!(theirs["error"]["errors"][0]["reason"], "forbidden");
    assert_eq!(
        theirs["error"]["message"],
        format!(
            "{TEAM_A} does not have storage.objects.list access to the Google Cloud Storage bucket. Permission 'storage.objects.list' denied on resource (or it may not exist)."
        )
    );
    // The same refusal whether or not anything is there: nothing leaks.
    let r = c
        .get(format!("{url}/storage/v1/b/team-b-data/o/nothing-here"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    let principals: Vec<(String, String)> =
        emu.calls().into_iter().map(|c| (c.method, c.principal)).collect();
    assert_eq!(
        principals[0],
        ("serviceAccounts.generateAccessToken".into(), OPERATOR.into())
    );
    assert_eq!(principals[2], ("objects.list".into(), TEAM_A.into()));
    assert_eq!(emu.tokens_minted(TEAM_A), 1);
    let iam: Value = c.get(&admin).send().await.unwrap().json().await.unwrap();
    assert_eq!(iam["minted"][TEAM_A], 1);

    // An hour later the token has expired: 401, as Google answers a stale token.
    emu.clock().advance(std::time::Duration::from_secs(3600));
    let (status, _) = list(&c, &url, "team-a-data", &token).await;
    assert_eq!(status, 401);
}
