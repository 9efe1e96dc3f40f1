//! Text one tenant writes (a workload's log lines, a job's error) as others are shown it: in
//! status, in Events, in the platform team's dashboards and terminals.
//!
//! Control characters could move a terminal's cursor or recolour it, and the invisible formatting
//! characters reorder or hide what a reader sees: the Unicode bidirectional embeddings, overrides
//! and isolates (UAX #9) make a line such as `exit 0` followed by an override and reversed text
//! read differently from what it says, the attack known as "Trojan Source" (CVE-2021-42574).
//! Both are replaced by a space.

/// Whether `c` changes how the text around it is shown without being shown itself: the
/// bidirectional embeddings and overrides (U+202A..U+202E) and isolates (U+2066..U+2069), the
/// directional marks (U+200E, U+200F, U+061C), the zero-width characters (U+200B..U+200D,
/// U+2060, U+FEFF) and the line and paragraph separators (U+2028, U+2029).
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{202A}'..='\u{202E}'
            | '\u{2066}'..='\u{2069}'
            | '\u{200B}'..='\u{200F}'
            | '\u{061C}'
            | '\u{2060}'
            | '\u{FEFF}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// `text` with every control character but the line break, and every invisible formatting
/// character, replaced by a space.
pub fn displayable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c != '\n' && (c.is_control() || is_invisible(c)) {
                ' '
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_overrides_become_spaces_and_line_breaks_stay() {
        let hostile = "exit \u{202E}0 tixe\u{202C}\r\x1b[2Kdone\u{2066}x\u{2069}\u{200B}\nnext";
        let shown = displayable(hostile);
        assert_eq!(shown, "exit  0 tixe   [2Kdone x  \nnext");
        assert!(!shown.chars().any(is_invisible));
        assert_eq!(
            displayable("ünïcode ✓ 日本"),
            "ünïcode ✓ 日本",
            "visible text is kept"
        );
    }
}
