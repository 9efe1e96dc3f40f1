//! GCP resource label rules, the same for Vertex AI and Dataproc.

/// GCP label rules (Vertex, Dataproc): keys 1-63 chars starting with a lowercase letter, values
/// 0-63 chars; lowercase letters, digits, `_` and `-` (international letters are accepted too).
pub fn label_ok(s: &str, is_value: bool) -> bool {
    let n = s.chars().count();
    let len_ok = if is_value { n <= 63 } else { (1..=63).contains(&n) };
    let first_ok = is_value || s.chars().next().is_some_and(|c| c.is_lowercase());
    len_ok
        && first_ok
        && s.chars().all(|c| {
            c.is_lowercase()
                || c.is_ascii_digit()
                || c == '_'
                || c == '-'
                || (!c.is_ascii() && c.is_alphanumeric())
        })
}
