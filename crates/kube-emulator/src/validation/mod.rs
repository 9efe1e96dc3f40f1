//! Validation of custom resources against their CRD, as the apiserver does it on create, update
//! and patch: prune unknown fields and apply `default`s, validate the structural schema, check
//! list-type invariants, then evaluate the `x-kubernetes-validations` CEL rules (only when the
//! object is type-valid). On update, errors on values that did not change are dropped
//! ("validation ratcheting", on by default since Kubernetes 1.30).
//!
//! This module is used both by the emulator's request handlers and, as a library, by the API
//! crate's schema tests, so the fixtures are checked by the very code the server runs.

mod cel;
pub mod path;
mod prune;
mod schema;
pub mod structural;

use path::FieldPath;
use serde_json::Value;
use std::fmt;

/// The kind of a field error, mirroring `field.ErrorType` (its `reason` in a Status cause).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorType {
    Invalid,
    TypeInvalid,
    Required,
    NotSupported,
    Forbidden,
    Duplicate,
    TooLong,
    TooMany,
}

impl FieldErrorType {
    /// The `metav1.StatusCause` reason the apiserver uses for this error type.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Invalid | Self::TypeInvalid => "FieldValueInvalid",
            Self::Required => "FieldValueRequired",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Forbidden => "FieldValueForbidden",
            Self::Duplicate => "FieldValueDuplicate",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
        }
    }

    fn from_message(message: &str) -> Self {
        const PREFIXES: [(&str, FieldErrorType); 7] = [
            ("Required value", FieldErrorType::Required),
            ("Unsupported value", FieldErrorType::NotSupported),
            ("Forbidden", FieldErrorType::Forbidden),
            ("Duplicate value", FieldErrorType::Duplicate),
            ("Too long", FieldErrorType::TooLong),
            ("Too many", FieldErrorType::TooMany),
            ("Invalid value", FieldErrorType::Invalid),
        ];
        PREFIXES
            .iter()
            .find(|(p, _)| message.starts_with(p))
            .map_or(Self::Invalid, |(_, t)| *t)
    }
}

/// One field error: `field` in the apiserver's dotted form (`spec.x[0].y`, `<nil>` for the
/// object root) and `message` as in a Status cause (`Invalid value: "x": ...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldCause {
    pub field: String,
    pub message: String,
}

impl FieldCause {
    pub fn new(kind: FieldErrorType, path: &FieldPath, message: String) -> Self {
        debug_assert_eq!(FieldErrorType::from_message(&message), kind_for_reason(kind));
        let field = if path.0.is_empty() {
            "<nil>".to_string()
        } else {
            path.to_string()
        };
        Self { field, message }
    }

    /// The Status cause reason (`FieldValueInvalid`, `FieldValueRequired`, ...).
    pub fn reason(&self) -> &'static str {
        FieldErrorType::from_message(&self.message).reason()
    }
}

fn kind_for_reason(kind: FieldErrorType) -> FieldErrorType {
    // TypeInvalid renders as "Invalid value" like Invalid does.
    if kind == FieldErrorType::TypeInvalid {
        FieldErrorType::Invalid
    } else {
        kind
    }
}

impl fmt::Display for FieldCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A rejected object: the field errors of a 422 `Invalid` Status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub causes: Vec<FieldCause>,
}

impl fmt::Display for Invalid {
    /// Formats like Go's `utilerrors.Aggregate`: one error bare, several as `[a, b]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.causes.iter().map(ToString::to_string).collect();
        if parts.len() == 1 {
            f.write_str(&parts[0])
        } else {
            write!(f, "[{}]", parts.join(", "))
        }
    }
}

impl std::error::Error for Invalid {}

/// The result of a successful validation with the details a server needs beyond the object.
#[derive(Clone, Debug)]
pub struct Validated {
    /// The object after pruning and defaulting: what the apiserver stores.
    pub object: Value,
    /// Unknown fields that were pruned, in dotted form (an error under `fieldValidation=Strict`).
    pub unknown_fields: Vec<String>,
}

/// The validator for one version of one CRD. Built once per CRD version and reused.
pub struct CrdValidator {
    structural: Value,
    json_schema: jsonschema::Validator,
    rules: kube_cel::CompiledSchema,
}

impl fmt::Debug for CrdValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrdValidator").finish_non_exhaustive()
    }
}

const BLOCKED_CEL: &str = "some validation rules were not checked because the object was invalid; \
                           correct the existing errors to complete validation";

impl CrdValidator {
    /// Builds the validator for `version` of an `apiextensions.k8s.io/v1` CustomResourceDefinition
    /// (as JSON). Fails when the version or its schema is missing, the schema is not valid JSON
    /// Schema, or a CEL rule does not compile.
    pub fn new(crd: &Value, version: &str) -> Result<CrdValidator, String> {
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("<unnamed>");
        let versions = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("CRD {name}: spec.versions is missing"))?;
        let entry = versions
            .iter()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
            .ok_or_else(|| format!("CRD {name}: no version {version:?} in spec.versions"))?;
        let structural = entry
            .pointer("/schema/openAPIV3Schema")
            .cloned()
            .ok_or_else(|| format!("CRD {name}: version {version} has no schema.openAPIV3Schema"))?;
        Self::from_schema(structural).map_err(|e| format!("CRD {name} version {version}: {e}"))
    }

    /// Builds a validator straight from an `openAPIV3Schema`.
    pub fn from_schema(structural: Value) -> Result<CrdValidator, String> {
        let converted = schema::to_json_schema(&structural, true);
        let json_schema = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft4)
            .should_validate_formats(false)
            .build(&converted)
            .map_err(|e| format!("openAPIV3Schema is not a valid schema: {e}"))?;
        let rules = cel::compile(&structural)?;
        Ok(CrdValidator {
            structural,
            json_schema,
            rules,
        })
    }

    /// The structural schema this validator checks against.
    pub fn schema(&self) -> &Value {
        &self.structural
    }

    /// Validates `new` (and, on update, against `old`): returns the pruned and defaulted object.
    pub fn validate(&self, new: &Value, old: Option<&Value>) -> Result<Value, Invalid> {
        self.validate_detailed(new, old).map(|v| v.object)
    }

    /// Like [`CrdValidator::validate`], also reporting the unknown fields that were pruned.
    pub fn validate_detailed(&self, new: &Value, old: Option<&Value>) -> Result<Validated, Invalid> {
        let mut object = new.clone();
        let unknown_fields = prune::prune_and_default(&self.structural, &mut object, true)
            .iter()
            .map(ToString::to_string)
            .collect();
        let old = old.map(|o| {
            let mut o = o.clone();
            prune::prune_and_default(&self.structural, &mut o, true);
            o
        });

        // Ratcheting comes first: an error on a value the update did not change neither counts
        // nor blocks the CEL rules (the ratcheting schema validator runs before `hasBlockingErr`).
        let changed = |cause: &FieldCause| old.as_ref().is_none_or(|old| !unchanged(cause, &object, old));
        let mut causes = Vec::new();
        let mut type_errors = false;
        for error in self.json_schema.iter_errors(&object) {
            let (cause, is_type_error) = schema::to_cause(&error);
            if changed(&cause) {
                type_errors |= is_type_error;
                causes.push(cause);
            }
        }
        schema::structural_checks(&self.structural, &object, &FieldPath::root(), &mut causes);
        causes.retain(changed);
        // A blocking schema error skips the CEL rules, and says so in one more cause.
        if blocks_cel(type_errors, &causes) {
            causes.push(FieldCause::new(
                FieldErrorType::Invalid,
                &FieldPath::root(),
                format!("Invalid value: null: {BLOCKED_CEL}"),
            ));
        } else {
            causes.extend(cel::evaluate(&self.rules, &object, old.as_ref()));
        }
        if let Some(old) = &old {
            causes.retain(|cause| !unchanged(cause, &object, old));
        }
        dedup(&mut causes);
        if causes.is_empty() {
            Ok(Validated {
                object,
                unknown_fields,
            })
        } else {
            Err(Invalid { causes })
        }
    }
}

/// Whether the schema's errors block the CEL rules: kube-apiserver skips them when the schema
/// found a type, required, enum, maxLength or maxItems/maxProperties error (`hasBlockingErr` in
/// k8s.io/apiextensions-apiserver pkg/registry/customresource/strategy.go, v0.36.3).
fn blocks_cel(type_errors: bool, causes: &[FieldCause]) -> bool {
    type_errors
        || causes.iter().any(|c| {
            matches!(
                FieldErrorType::from_message(&c.message),
                FieldErrorType::Required
                    | FieldErrorType::NotSupported
                    | FieldErrorType::TooLong
                    | FieldErrorType::TooMany
            )
        })
}

/// Validation ratcheting: an error about a value the update did not change is not reported.
/// "Required" errors are about the parent object, which must be unchanged.
fn unchanged(cause: &FieldCause, new: &Value, old: &Value) -> bool {
    if cause.field == "<nil>" {
        return new == old;
    }
    let mut path = FieldPath::parse(&cause.field);
    if cause.reason() == "FieldValueRequired" {
        path = path.parent();
    }
    match (path.lookup(new), path.lookup(old)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

fn dedup(causes: &mut Vec<FieldCause>) {
    let mut seen = Vec::new();
    causes.retain(|c| {
        if seen.contains(c) {
            false
        } else {
            seen.push(c.clone());
            true
        }
    });
}

#[cfg(test)]
mod tests;
