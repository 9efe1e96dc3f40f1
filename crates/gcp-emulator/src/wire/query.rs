//! Query strings as Google's front end reads them: form-encoded (`+` is a space), `$alt` also
//! spelled `%24alt`, and empty values (`pageSize=0`, `pageToken=`, `requestId=`, `filter=`) meaning
//! "unset" because the Rust SDK always sends every declared parameter.

use crate::errors::{ApiError, ApiResult};

#[derive(Clone, Debug, Default)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

fn decode(s: &str) -> String {
    let spaced = s.replace('+', " ");
    urlencoding::decode(&spaced)
        .map(|c| c.into_owned())
        .unwrap_or(spaced)
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        let pairs = raw
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (decode(k), decode(v)),
                None => (decode(p), String::new()),
            })
            .collect();
        Query { pairs }
    }

    /// The value of `key`, `None` when absent or empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// True when the client asked for integer enums (`$alt=json;enum-encoding=int`).
    pub fn enum_int(&self) -> bool {
        self.pairs
            .iter()
            .any(|(k, v)| (k == "$alt" || k == "alt") && v.contains("enum-encoding=int"))
    }

    /// `pageSize` (0 or absent = server default, capped at `max`).
    pub fn page_size(&self, key: &str, default: usize, max: usize) -> ApiResult<usize> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => {
                let n: i64 = v.parse().map_err(|_| {
                    ApiError::invalid_field(key, format!("Invalid value at '{key}' (TYPE_INT32), \"{v}\""))
                })?;
                if n < 0 {
                    return Err(ApiError::invalid_field(
                        key,
                        format!("{key} must not be negative"),
                    ));
                }
                Ok(if n == 0 { default } else { (n as usize).min(max) })
            }
        }
    }

    pub fn bool(&self, key: &str) -> ApiResult<bool> {
        match self.get(key) {
            None => Ok(false),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(ApiError::invalid_field(
                key,
                format!("Invalid value at '{key}' (TYPE_BOOL), \"{v}\""),
            )),
        }
    }

    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }
}

/// Opaque page tokens: the offset into the (stable) ordered result, base-16 with a prefix so a
/// token from another list is rejected rather than misread.
pub fn page_token(offset: usize) -> String {
    format!("pt{offset:x}")
}

pub fn parse_page_token(token: Option<&str>) -> ApiResult<usize> {
    match token {
        None => Ok(0),
        Some(t) => t
            .strip_prefix("pt")
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or_else(|| ApiError::invalid_field("page_token", format!("Invalid page token \"{t}\""))),
    }
}

/// Cuts one page out of `items` and returns it with the next page token (if any).
pub fn paginate<T: Clone>(
    items: &[T],
    size: usize,
    token: Option<&str>,
) -> ApiResult<(Vec<T>, Option<String>)> {
    let start = parse_page_token(token)?;
    if start > items.len() {
        return Err(ApiError::invalid_field(
            "page_token",
            "Page token is out of range",
        ));
    }
    let end = (start + size).min(items.len());
    let next = (end < items.len()).then(|| page_token(end));
    Ok((items[start..end].to_vec(), next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdk_query_is_read_like_google() {
        let q = Query::parse(Some(
            "pageSize=0&pageToken=&filter=labels.owner+%3D+op+AND+state+%3D+RUNNING&%24alt=json%3Benum-encoding%3Dint",
        ));
        assert_eq!(q.get("pageToken"), None);
        assert_eq!(q.page_size("pageSize", 20, 1000).unwrap(), 20);
        assert_eq!(q.get("filter"), Some("labels.owner = op AND state = RUNNING"));
        assert!(q.enum_int());
        assert!(!Query::parse(Some("alt=json")).enum_int());
    }

    #[test]
    fn paging_walks_all_items() {
        let items: Vec<u32> = (0..5).collect();
        let (p1, t1) = paginate(&items, 2, None).unwrap();
        assert_eq!(p1, vec![0, 1]);
        let (p2, t2) = paginate(&items, 2, t1.as_deref()).unwrap();
        assert_eq!(p2, vec![2, 3]);
        let (p3, t3) = paginate(&items, 2, t2.as_deref()).unwrap();
        assert_eq!((p3, t3), (vec![4], None));
        assert!(paginate(&items, 2, Some("garbage")).is_err());
    }
}
