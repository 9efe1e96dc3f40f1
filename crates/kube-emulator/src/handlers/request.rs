//! Parsing a request: which resource, namespace, name and subresource the path names, the query
//! parameters, the output format the Accept header asks for, and the body.

use crate::errors::{ApiError, ApiResult};
use crate::table::IncludeObject;
use crate::watch::Output;
use axum::http::HeaderMap;
use serde_json::Value;
use std::collections::HashMap;

/// A path under `/api/v1` or `/apis/{group}/{version}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub plural: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// Splits a resource path. Returns None for paths that are not group-version paths.
pub fn parse_path(path: &str) -> Option<ResourcePath> {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => (String::new(), version.to_string(), rest),
        ["apis", group, version, rest @ ..] => (group.to_string(), version.to_string(), rest),
        _ => return None,
    };
    let mut p = ResourcePath {
        group,
        version,
        plural: None,
        namespace: None,
        name: None,
        subresource: None,
    };
    let core_namespace_object = p.group.is_empty()
        && rest.first() == Some(&"namespaces")
        && rest.len() <= 3
        && rest.get(2).is_none_or(|s| matches!(*s, "status" | "finalize"));
    let rest: Vec<String> =
        if rest.first() == Some(&"namespaces") && rest.len() >= 3 && !core_namespace_object {
            p.namespace = Some(rest[1].to_string());
            rest[2..].iter().map(|s| s.to_string()).collect()
        } else {
            rest.iter().map(|s| s.to_string()).collect()
        };
    let mut it = rest.into_iter();
    p.plural = it.next();
    p.name = it.next();
    p.subresource = it.next();
    if it.next().is_some() {
        return None;
    }
    Some(p)
}

/// Query parameters, decoded (`+` is a space in form encoding).
pub fn parse_query(raw: Option<&str>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for pair in raw.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            urlencoding::decode(&s.replace('+', " "))
                .map(|c| c.into_owned())
                .unwrap_or_default()
        };
        out.insert(decode(k), decode(v));
    }
    out
}

pub fn flag(query: &HashMap<String, String>, key: &str) -> bool {
    query
        .get(key)
        .is_some_and(|v| v == "true" || v == "1" || v.is_empty())
}

/// What representation the client asked for in `Accept`.
pub fn output(headers: &HeaderMap, query: &HashMap<String, String>) -> Output {
    let accept = headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    // The first acceptable media type wins, as in the apiserver's negotiation.
    for media in accept.split(',') {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        let base = params.first().copied().unwrap_or_default();
        if base != "application/json" && base != "*/*" && base != "application/*" {
            continue;
        }
        let has = |p: &str| params.iter().any(|x| x.replace(' ', "") == p);
        if has("as=Table") && (has("g=meta.k8s.io") || !params.iter().any(|x| x.starts_with("g="))) {
            let include = match query.get("includeObject").map(String::as_str) {
                Some("None") => IncludeObject::None,
                Some("Object") => IncludeObject::Object,
                _ => IncludeObject::Metadata,
            };
            return Output::Table(include);
        }
        if has("as=PartialObjectMetadata") || has("as=PartialObjectMetadataList") {
            return Output::Metadata;
        }
        if params.iter().any(|x| x.starts_with("as=")) {
            continue;
        }
        return Output::Object;
    }
    Output::Object
}

/// Parses a JSON (or YAML) request body.
pub fn body_value(body: &[u8], content_type: &str) -> ApiResult<Value> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    match serde_json::from_slice(body) {
        Ok(v) => Ok(v),
        Err(json_err) => {
            if content_type.contains("yaml") {
                serde_yaml::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
            } else {
                Err(ApiError::bad_request(format!(
                    "couldn't get version/kind; json parse error: {json_err}"
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_resource_paths() {
        let p = parse_path("/apis/g.dev/v1/namespaces/ns/widgets/w/status").unwrap();
        assert_eq!(
            (
                p.group.as_str(),
                p.namespace.as_deref(),
                p.plural.as_deref(),
                p.name.as_deref(),
                p.subresource.as_deref()
            ),
            ("g.dev", Some("ns"), Some("widgets"), Some("w"), Some("status"))
        );
        let ns = parse_path("/api/v1/namespaces/foo").unwrap();
        assert_eq!(
            (ns.plural.as_deref(), ns.name.as_deref(), ns.namespace),
            (Some("namespaces"), Some("foo"), None)
        );
        let fin = parse_path("/api/v1/namespaces/foo/finalize").unwrap();
        assert_eq!(fin.subresource.as_deref(), Some("finalize"));
        let cms = parse_path("/api/v1/namespaces/foo/configmaps").unwrap();
        assert_eq!(
            (cms.plural.as_deref(), cms.namespace.as_deref()),
            (Some("configmaps"), Some("foo"))
        );
        let all = parse_path("/api/v1/configmaps").unwrap();
        assert_eq!((all.plural.as_deref(), all.namespace), (Some("configmaps"), None));
        assert!(parse_path("/version").is_none());
    }

    #[test]
    fn query_decoding_and_accept() {
        let q = parse_query(Some("labelSelector=app+in+%28a%2C+b%29&watch=1"));
        assert_eq!(q["labelSelector"], "app in (a, b)");
        assert!(flag(&q, "watch"));
        let mut h = HeaderMap::new();
        h.insert(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
                .parse()
                .unwrap(),
        );
        assert_eq!(output(&h, &q), Output::Table(IncludeObject::Metadata));
    }
}
