//! Cloud Storage JSON API v1 (the subset the operator uses), served at its own paths
//! `/storage/v1/...`, `/upload/storage/v1/...` and `/download/storage/v1/...`.
//! Buckets are created automatically on the first object write (or with `buckets.insert` / the
//! admin API); reading from a missing bucket is a 404 like on GCS.

pub mod buckets;
pub mod objects;

use crate::api::{Reply, Req};
use crate::cloud::Cloud;
use crate::errors::{ApiError, ApiResult, Code};
use axum::http::Method;

/// Which API root a storage request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    Json,
    Upload,
    Download,
}

#[derive(Debug)]
pub enum Route {
    Buckets,
    Bucket(String),
    Objects(String),
    Object(String, String),
}

pub fn route(root: Root, req: &Req) -> Option<(Route, &'static str)> {
    let s = &req.segs;
    let m = &req.method;
    Some(match (root, s.first().map(String::as_str), s.len()) {
        (Root::Json, Some("b"), 1) => match *m {
            Method::POST => (Route::Buckets, "buckets.insert"),
            Method::GET => (Route::Buckets, "buckets.list"),
            _ => return None,
        },
        (Root::Json, Some("b"), 2) => match *m {
            Method::GET => (Route::Bucket(s[1].clone()), "buckets.get"),
            Method::DELETE => (Route::Bucket(s[1].clone()), "buckets.delete"),
            _ => return None,
        },
        (Root::Json, Some("b"), 3) if s[2] == "o" => match *m {
            Method::GET => (Route::Objects(s[1].clone()), "objects.list"),
            Method::POST => (Route::Objects(s[1].clone()), "objects.insert"),
            _ => return None,
        },
        (Root::Upload, Some("b"), 3) if s[2] == "o" && *m == Method::POST => {
            (Route::Objects(s[1].clone()), "objects.insert")
        }
        (Root::Json | Root::Download, Some("b"), n) if n >= 4 && s[2] == "o" => {
            // Object names arrive as one %2F-encoded segment; tolerate raw slashes too.
            let name = s[3..].join("/");
            match *m {
                Method::GET => (Route::Object(s[1].clone(), name), "objects.get"),
                Method::DELETE if root == Root::Json => (Route::Object(s[1].clone(), name), "objects.delete"),
                _ => return None,
            }
        }
        _ => return None,
    })
}

pub fn handle(w: &mut Cloud, req: &Req, route: Route, method: &str) -> ApiResult<Reply> {
    match (route, method) {
        (Route::Buckets, "buckets.insert") => buckets::insert(w, req),
        (Route::Buckets, _) => buckets::list(w, req),
        (Route::Bucket(b), "buckets.get") => buckets::get(w, &b),
        (Route::Bucket(b), _) => buckets::delete(w, &b),
        (Route::Objects(b), "objects.list") => objects::list(w, &b, &req.query),
        (Route::Objects(b), _) => objects::insert(w, &b, req),
        (Route::Object(b, o), "objects.get") => objects::get(w, &b, &o, &req.query),
        (Route::Object(b, o), _) => objects::delete(w, &b, &o),
    }
}

pub fn no_bucket() -> ApiError {
    ApiError::gcs(Code::NotFound, "notFound", "The specified bucket does not exist.")
}

pub fn no_object(bucket: &str, name: &str) -> ApiError {
    ApiError::gcs(
        Code::NotFound,
        "notFound",
        format!("No such object: {bucket}/{name}"),
    )
}
