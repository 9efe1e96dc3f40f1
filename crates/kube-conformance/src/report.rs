//! Turns a [`Comparison`] into a verdict (new differences fail, accepted ones are listed) and a
//! Markdown report the suite prints and writes next to the target directory.

use std::fmt::Write as _;

use crate::{
    known::{KNOWN, Known},
    transcript::{Comparison, StepDifference, Transcript},
};

/// The comparison split by the list of accepted differences.
#[derive(Debug)]
pub struct Verdict<'a> {
    pub compared: usize,
    pub accepted: Vec<(&'a StepDifference, &'static Known)>,
    pub new: Vec<&'a StepDifference>,
    /// Accepted entries that matched nothing: the emulator was fixed, the entry should go.
    pub stale: Vec<&'static Known>,
}

pub fn verdict(comparison: &Comparison) -> Verdict<'_> {
    verdict_with(comparison, KNOWN)
}

pub fn verdict_with<'a>(comparison: &'a Comparison, known: &'static [Known]) -> Verdict<'a> {
    let mut accepted = Vec::new();
    let mut new = Vec::new();
    for d in &comparison.differences {
        match known.iter().find(|k| k.matches(d)) {
            Some(k) => accepted.push((d, k)),
            None => new.push(d),
        }
    }
    let stale = known
        .iter()
        .filter(|k| !accepted.iter().any(|(_, a)| std::ptr::eq(*a, *k)))
        .collect();
    Verdict {
        compared: comparison.compared,
        accepted,
        new,
        stale,
    }
}

fn row(out: &mut String, d: &StepDifference, note: &str) {
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let _ = writeln!(
        out,
        "| {} | {} | `{}` | {} | {} | {} |",
        d.index,
        cell(&d.step),
        cell(&d.difference.path),
        cell(&d.difference.emulator),
        cell(&d.difference.real),
        cell(note)
    );
}

/// Markdown: counts, new differences, accepted differences with reasons, stale entries.
pub fn markdown(v: &Verdict<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "compared exchanges: {}; new differences: {}; accepted differences: {}; stale accepted entries: {}\n",
        v.compared,
        v.new.len(),
        v.accepted.len(),
        v.stale.len()
    );
    let header = "| # | step | path | kube-emulator | kube-apiserver | note |\n|---|---|---|---|---|---|";
    if !v.new.is_empty() {
        let _ = writeln!(out, "### New differences\n\n{header}");
        v.new.iter().for_each(|d| row(&mut out, d, ""));
        out.push('\n');
    }
    if !v.accepted.is_empty() {
        let _ = writeln!(out, "### Accepted differences\n\n{header}");
        v.accepted.iter().for_each(|(d, k)| row(&mut out, d, k.reason));
        out.push('\n');
    }
    for k in &v.stale {
        let _ = writeln!(
            out,
            "stale accepted entry (matches nothing now): step `{}` path `{}`",
            k.step, k.path
        );
    }
    out
}

/// Steps where a server's status is not the one the scenario expects, one line each.
pub fn unexpected(server: &str, t: &Transcript) -> Vec<String> {
    t.unexpected()
        .map(|e| {
            let body = e.body.to_string();
            let body = &body[..body.floor_char_boundary(400)];
            format!(
                "{server}: step {:?} ({}) answered {} (expected {}): {body}",
                e.step, e.request, e.status, e.expected
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::Difference;

    fn difference(step: &str, path: &str) -> StepDifference {
        StepDifference {
            index: 0,
            step: step.into(),
            request: "GET /x".into(),
            difference: Difference {
                path: path.into(),
                emulator: "1".into(),
                real: "2".into(),
            },
        }
    }

    static KNOWN_FOR_TEST: &[Known] = &[
        Known {
            step: "namespace: create",
            path: "metadata.labels*",
            reason: "label set by admission",
        },
        Known {
            step: "never",
            path: "*",
            reason: "fixed long ago",
        },
    ];

    #[test]
    fn splits_new_accepted_and_stale() {
        let comparison = Comparison {
            compared: 2,
            differences: vec![
                difference("namespace: create", "metadata.labels.kubernetes.io/metadata.name"),
                difference("configmap: get", "data.a"),
            ],
        };
        let v = verdict_with(&comparison, KNOWN_FOR_TEST);
        assert_eq!(v.accepted.len(), 1);
        assert_eq!(v.new.len(), 1);
        assert_eq!(v.new[0].step, "configmap: get");
        assert_eq!(v.stale.len(), 1);
        assert_eq!(v.stale[0].step, "never");
        let md = markdown(&v);
        assert!(md.contains("new differences: 1"), "{md}");
        assert!(md.contains("label set by admission"), "{md}");
    }
}
