use super::*;
use crate::api::Req;
use axum::http::Method;
use bytes::Bytes;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-02T09:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn mint_req(body: &str) -> Req {
    Req {
        method: Method::POST,
        version: "v1",
        segs: [
            "projects",
            "-",
            "serviceAccounts",
            "team-a@p.iam.gserviceaccount.com",
        ]
        .map(String::from)
        .to_vec(),
        verb: Some("generateAccessToken".into()),
        query: Default::default(),
        body: Bytes::from(body.to_string()),
        content_type: None,
    }
}

const TEAM_A: &str = "team-a@p.iam.gserviceaccount.com";
const SCOPE: &str = r#"{"scope":["https://www.googleapis.com/auth/cloud-platform"]}"#;

#[test]
fn unbound_buckets_and_accounts_are_open_and_requests_act_as_the_default_principal() {
    let mut iam = Iam::default();
    assert_eq!(iam.caller(None, now()).unwrap(), DEFAULT_PRINCIPAL);
    assert_eq!(
        iam.caller(Some("Bearer not-minted"), now()).unwrap(),
        DEFAULT_PRINCIPAL
    );
    iam.authorize_storage("anyone@x", "objects.list", "b", None, true)
        .unwrap();
    iam.generate_access_token("anyone@x", TEAM_A, &mint_req(SCOPE), now(), "1")
        .unwrap();
}

#[test]
fn a_token_acts_as_its_account_until_it_expires() {
    let mut iam = Iam::default();
    iam.grant_token_creator(TEAM_A, &format!("serviceAccount:{DEFAULT_PRINCIPAL}"));
    let denied = iam
        .generate_access_token("intruder@x", TEAM_A, &mint_req(SCOPE), now(), "1")
        .unwrap_err();
    assert_eq!(denied.http_status(), 403);
    let body = denied.body();
    assert_eq!(body["error"]["status"], "PERMISSION_DENIED");
    assert_eq!(body["error"]["details"][0]["reason"], "IAM_PERMISSION_DENIED");
    assert_eq!(
        body["error"]["details"][0]["metadata"]["permission"],
        "iam.serviceAccounts.getAccessToken"
    );
    let reply = iam
        .generate_access_token(
            DEFAULT_PRINCIPAL,
            TEAM_A,
            &mint_req(r#"{"scope":["s"],"lifetime":"600s"}"#),
            now(),
            "2",
        )
        .unwrap();
    let crate::api::Body::Json(v) = reply.body else {
        panic!()
    };
    assert_eq!(v["expireTime"], "2026-03-02T09:10:00.000000Z");
    let header = format!("Bearer {}", v["accessToken"].as_str().unwrap());
    assert_eq!(iam.caller(Some(&header), now()).unwrap(), TEAM_A);
    let later = now() + chrono::Duration::seconds(600);
    assert_eq!(iam.caller(Some(&header), later).unwrap_err().http_status(), 401);
    assert_eq!(iam.minted[TEAM_A], 1);
}

#[test]
fn lifetimes_and_scopes_are_checked() {
    let mut iam = Iam::default();
    for body in [
        r#"{}"#,
        r#"{"scope":[]}"#,
        r#"{"scope":["s"],"lifetime":"3601s"}"#,
    ] {
        let e = iam
            .generate_access_token("a@x", TEAM_A, &mint_req(body), now(), "1")
            .unwrap_err();
        assert_eq!(e.http_status(), 400, "{body}");
    }
}

#[test]
fn a_bound_bucket_is_reached_only_with_a_role_carrying_the_permission() {
    let mut iam = Iam::default();
    iam.grant_bucket(
        "team-b",
        "roles/storage.objectViewer",
        "serviceAccount:b@p.iam.gserviceaccount.com",
    )
    .unwrap();
    iam.authorize_storage(
        "b@p.iam.gserviceaccount.com",
        "objects.list",
        "team-b",
        None,
        true,
    )
    .unwrap();
    let e = iam
        .authorize_storage(
            "b@p.iam.gserviceaccount.com",
            "objects.insert",
            "team-b",
            None,
            true,
        )
        .unwrap_err();
    assert!(e.message.contains("storage.objects.create"), "{}", e.message);
    let e = iam
        .authorize_storage(TEAM_A, "objects.get", "team-b", Some("ckpt/1"), true)
        .unwrap_err();
    let body = e.body();
    assert_eq!(body["error"]["code"], 403);
    assert_eq!(body["error"]["errors"][0]["reason"], "forbidden");
    assert_eq!(
        body["error"]["message"],
        format!(
            "{TEAM_A} does not have storage.objects.get access to the Google Cloud Storage object. \
             Permission 'storage.objects.get' denied on resource (or it may not exist)."
        )
    );
    // A missing bucket is Cloud Storage's own 404; another bucket stays open.
    iam.authorize_storage(TEAM_A, "objects.list", "team-b", None, false)
        .unwrap();
    iam.authorize_storage(TEAM_A, "objects.list", "shared", None, true)
        .unwrap();
    assert!(iam.grant_bucket("x", "roles/owner", TEAM_A).is_err());
}
