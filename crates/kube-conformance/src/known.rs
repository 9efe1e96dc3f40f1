//! Differences between kube-emulator and the real kube-apiserver that have been looked at and
//! accepted, each with the reason. The differential suite fails on any difference not listed here,
//! and reports entries that no longer match anything (fixed in the emulator: delete the entry).

use crate::transcript::StepDifference;

/// One listed difference: `step` and `path` are globs (`*` matches any run of characters) over
/// the step label and the JSON path of a difference (`<http status>` for the status code).
#[derive(Debug, Clone, Copy)]
pub struct Known {
    pub step: &'static str,
    pub path: &'static str,
    pub reason: &'static str,
}

impl Known {
    pub fn matches(&self, d: &StepDifference) -> bool {
        glob(self.step, &d.step) && glob(self.path, &d.difference.path)
    }

    /// True when this entry covers a wrong HTTP status at `step` (used when only the emulator runs).
    pub fn covers_status(&self, step: &str) -> bool {
        glob(self.step, step) && glob(self.path, "<http status>")
    }
}

/// Whole-string match where `*` matches any (possibly empty) run of characters.
pub fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The listed differences, found by running the suite against kube-apiserver v1.36.3 on
/// 2026-11-22. Each reason starts with `FIX:` (an emulator gap to close; listed so CI catches any
/// *new* difference meanwhile) or `OK:` (acceptable, with why). docs/testing.md has the same table.
pub const KNOWN: &[Known] = &[
    // --- systemic, every step ---------------------------------------------------------------
    Known {
        step: "*",
        path: "*managedFields*..",
        reason: "FIX: emulator's fieldsV1 omits the `\".\": {}` membership markers the real field manager \
                 records for maps and list items it owns",
    },
    Known {
        step: "*",
        path: "*managedFields*f:generateName",
        reason: "FIX: real records metadata.generateName in the creating manager's field set",
    },
    Known {
        step: "configmap: list*",
        path: "items[*].*",
        reason: "OK: list items carry apiVersion/kind in the emulator, not on the real server (clients \
                 take them from the list); the data.d / resourceVersion parts follow from the accepted \
                 non-string-data patch at step `merge patch with non-string data`",
    },
    Known {
        step: "configmap: delete collection by label",
        path: "items[*].*",
        reason: "OK: list items carry apiVersion/kind in the emulator only",
    },
    // --- CRDs and discovery ----------------------------------------------------------------
    Known {
        step: "crd: *",
        path: "*",
        reason: "FIX (defaults) / OK (timing): real defaults spec.conversion.strategy=None and \
                 spec.names.listKind, establishes asynchronously (create returns empty acceptedNames, \
                 one more resourceVersion) and adds a Terminating condition on delete; the emulator \
                 establishes synchronously, adds the cleanup finalizer at create, bumps generation, and \
                 sets deletionGracePeriodSeconds on delete",
    },
    Known {
        step: "project crd: *",
        path: "*",
        reason: "FIX (defaults) / OK (timing): as for `crd: *`; also whole-number bounds in our CRDs \
                 (`minimum: 0.0`, as schemars writes them) come back as `0` from kube-apiserver (Go's \
                 float encoding) and as `0.0` from the emulator: same value",
    },
    Known {
        step: "discovery: group version lists widgets",
        path: "resources[0].*",
        reason: "OK: verbs are a set (real orders them differently); storageVersionHash only matters to \
                 the storage-version migrator",
    },
    // --- namespaces ------------------------------------------------------------------------
    Known {
        step: "namespace: *",
        path: "metadata.labels",
        reason: "FIX: real adds the label kubernetes.io/metadata.name=<name> to every namespace \
                 (NamespaceSelector policies rely on it)",
    },
    Known {
        step: "namespace: *",
        path: "*managedFields*",
        reason: "FIX: follows from the missing kubernetes.io/metadata.name label; real does not list \
                 spec.finalizers in the creator's field set",
    },
    Known {
        step: "namespace: delete",
        path: "metadata.deletionGracePeriodSeconds",
        reason: "OK: the emulator sets deletionGracePeriodSeconds=0 on a terminating namespace",
    },
    // --- built-in kinds ---------------------------------------------------------------------
    Known {
        step: "configmap: json patch failing test",
        path: "*",
        reason: "OK: same 422 Invalid; the emulator's message names the failing operation where real \
                 says only `the server rejected our request due to an error in our request`",
    },
    Known {
        step: "configmap: merge patch with non-string data",
        path: "*",
        reason: "FIX: the emulator does not type-check built-in kinds, so data.d=5 is stored (200) where \
                 real answers 422",
    },
    Known {
        step: "configmap: delete with wrong uid precondition",
        path: "*",
        reason: "FIX (minor): details.kind is the resource (configmaps) instead of the kind (ConfigMap), \
                 and the message says `configmaps` where real says `ConfigMap`",
    },
    Known {
        step: "secret: create with invalid base64",
        path: "*",
        reason: "FIX: the emulator stores a Secret whose data is not base64 (201); real answers 400 \
                 BadRequest",
    },
    Known {
        step: "event: create",
        path: "deprecated*",
        reason: "OK: real returns deprecatedFirstTimestamp/LastTimestamp null and deprecatedSource {}",
    },
    Known {
        step: "event: *",
        path: "*managedFields*f:regarding*",
        reason: "FIX (minor): the emulator tracks regarding's fields individually; real owns `regarding` \
                 as a whole",
    },
    Known {
        step: "event: create without required fields",
        path: "*",
        reason: "FIX: the emulator does not validate built-in Events (201); real answers 422 naming \
                 eventTime, type, reportingController, ...",
    },
    Known {
        step: "event: read through core/v1",
        path: "*",
        reason: "OK: the core/v1 view of the same Event has firstTimestamp/lastTimestamp null and source \
                 {} on the real server",
    },
    // --- custom resource validation -----------------------------------------------------------
    Known {
        step: "widget: create with wrong type",
        path: "details.causes[0].reason",
        reason: "FIX (minor): real's cause reason is FieldValueTypeInvalid",
    },
    Known {
        step: "fixture invalid/slice-v6e-3-chips: create",
        path: "*message",
        reason: "FIX (minor): for a rule declared on a scalar field real prints the value \
                 (`Invalid value: \"v6e-3\": <msg>`); the emulator omits it as real does for rules on \
                 objects (it does not track where a rule with fieldPath was declared)",
    },
    Known {
        step: "widget: strategic merge patch on a custom resource",
        path: "message",
        reason: "OK: same 415; the list of accepted media types in the message differs",
    },
    // --- server-side apply ----------------------------------------------------------------------
    Known {
        step: "apply*: * conflicts on *",
        path: "*",
        reason: "FIX: conflict causes use the key `type` instead of `reason` (metav1.StatusCause), carry \
                 details.group/kind/name real omits, and word the message differently (`using <apiVersion>` \
                 vs real's `with subresource \"status\"`)",
    },
    Known {
        step: "apply: bob applies alice's value (shared ownership)",
        path: "metadata.managedFields[1].time",
        reason: "OK: real keeps no time on an Apply entry whose field set did not change",
    },
    Known {
        step: "apply: alice omits tags and label (removed)",
        path: "*",
        reason: "FIX: the emulator answers 409 (conflict with bob on .metadata.labels) when two managers \
                 both applied an empty labels map; real treats that as shared ownership (200) and \
                 removes alice's tags and owner label",
    },
    Known {
        step: "apply*",
        path: "*",
        reason: "FIX: follows from `alice omits tags and label` (409 in the emulator): the object keeps \
                 tags, the owner label and an older generation / resourceVersion",
    },
    Known {
        step: "watch: list widgets for a starting resourceVersion",
        path: "items[3].*",
        reason: "FIX: the `shared` widget still differs because of `alice omits tags and label`",
    },
    Known {
        step: "watch: list widgets for a starting resourceVersion",
        path: "metadata.continue",
        reason: "OK: real lists carry `continue: \"\"`",
    },
    // --- deletion -------------------------------------------------------------------------------
    Known {
        step: "finalizer: adding one while deleting is rejected",
        path: "*",
        reason: "OK: same 422 Forbidden; real formats the finalizer list as Go (`[]string{...}`) and \
                 reports the cause twice",
    },
    Known {
        step: "finalizer: removing the last finalizer",
        path: "metadata.resourceVersion",
        reason: "OK: real answers the final update with the object's previous resourceVersion, the \
                 emulator with a new one (the object is gone either way)",
    },
    Known {
        step: "gc*",
        path: "*managedFields*f:ownerReferences.k:*",
        reason: "FIX (minor): the emulator tracks each field of an ownerReferences item; real owns the \
                 item (keyed by uid) as a whole",
    },
    Known {
        step: "gc orphan: *child kept, ownerReferences removed",
        path: "*managedFields*",
        reason: "FIX (minor): after orphaning, the emulator keeps the creator's field-set entry for the \
                 removed ownerReference; real's garbage-collector update leaves none",
    },
    Known {
        step: "watch: list widgets for a starting resourceVersion",
        path: "items[0].metadata.managedFields*",
        reason: "FIX (minor): after orphaning, the emulator keeps the creator's field-set entry for the \
                 removed ownerReference; real's garbage-collector update leaves none",
    },
    Known {
        step: "gc orphan: delete owner",
        path: "*",
        reason: "FIX (minor): real answers an orphan delete with the owner carrying the `orphan` \
                 finalizer and deletionTimestamp (the garbage collector orphans, then deletes); the \
                 emulator orphans synchronously and answers Status Success",
    },
];

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn glob_matches_whole_strings_with_stars() {
        assert!(glob("crd: *", "crd: create Widget"));
        assert!(!glob("crd: ", "crd: create Widget"));
        assert!(glob(
            "*managedFields*..",
            "items[0].metadata.managedFields[1].fieldsV1.f:data.."
        ));
        assert!(!glob("*managedFields*..", "metadata.managedFields[1].manager"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "abc"));
        assert!(!glob("a*b*c", "acb"));
        assert!(glob("<http status>", "<http status>"));
    }
}
