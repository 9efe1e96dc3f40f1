//! `x-kubernetes-validations` CEL rules, evaluated with `kube-cel` at every schema level.
//! Transition rules (those naming `oldSelf`) only run on update when the old value exists, which
//! kube-cel decides per node by correlating the old object field by field.

use super::path::{FieldPath, type_name};
use super::{FieldCause, FieldErrorType};
use kube_cel::{CompiledSchema, ErrorKind, ValidationError};
use serde_json::Value;

thread_local! {
    // kube-cel's validator holds a CEL context with all Kubernetes functions registered; it is not
    // Sync, so each server thread keeps its own instead of rebuilding it per request.
    static VALIDATOR: kube_cel::Validator = kube_cel::Validator::new();
}

/// Compiles every rule of the schema; a rule that does not compile is an error at CRD creation,
/// as in the apiserver.
pub fn compile(schema: &Value) -> Result<CompiledSchema, String> {
    let compiled = kube_cel::compile_schema(schema);
    let mut problems = Vec::new();
    collect_compile_errors(&compiled, &FieldPath::root(), &mut problems);
    if problems.is_empty() {
        Ok(compiled)
    } else {
        Err(problems.join("; "))
    }
}

fn collect_compile_errors(node: &CompiledSchema, path: &FieldPath, out: &mut Vec<String>) {
    for error in node.compilation_errors() {
        let at = if path.0.is_empty() {
            "<root>".to_string()
        } else {
            path.to_string()
        };
        out.push(format!("{at}: x-kubernetes-validations: {error}"));
    }
    for (name, child) in &node.properties {
        collect_compile_errors(child, &path.key(name), out);
    }
    if let Some(items) = &node.items {
        collect_compile_errors(items, &path.key("items"), out);
    }
    if let Some(additional) = &node.additional_properties {
        collect_compile_errors(additional, &path.key("additionalProperties"), out);
    }
    for branch in node.all_of.iter().chain(&node.one_of).chain(&node.any_of) {
        collect_compile_errors(branch, path, out);
    }
}

/// Runs the rules on a type-valid, defaulted object and returns the apiserver's field errors.
pub fn evaluate(compiled: &CompiledSchema, object: &Value, old: Option<&Value>) -> Vec<FieldCause> {
    let result = VALIDATOR.with(|v| v.validate_compiled(compiled, object, old));
    match result {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(|e| to_cause(e, object)).collect(),
    }
}

fn to_cause(error: &ValidationError, object: &Value) -> FieldCause {
    let path = FieldPath::parse(&error.field_path);
    // The apiserver prints the schema type of the node as the "value" of CEL errors.
    let shown_type = path.lookup(object).map_or("object", type_name);
    match error.kind {
        ErrorKind::ValidationFailure => {
            let message = error.message.trim().to_string();
            match error.reason.as_deref() {
                Some("FieldValueForbidden") => {
                    FieldCause::new(FieldErrorType::Forbidden, &path, format!("Forbidden: {message}"))
                }
                Some("FieldValueRequired") => FieldCause::new(
                    FieldErrorType::Required,
                    &path,
                    format!("Required value: {message}"),
                ),
                Some("FieldValueDuplicate") => FieldCause::new(
                    FieldErrorType::Duplicate,
                    &path,
                    format!("Duplicate value: \"{shown_type}\""),
                ),
                // kube-apiserver 1.36 omits the value of a failed rule (older releases printed
                // the node's type, e.g. `Invalid value: "string": ...`).
                _ => FieldCause::new(
                    FieldErrorType::Invalid,
                    &path,
                    format!("Invalid value: {message}"),
                ),
            }
        }
        _ => FieldCause::new(
            FieldErrorType::Invalid,
            &path,
            format!(
                "Invalid value: \"{shown_type}\": {} evaluating rule: {}",
                error.message, error.rule
            ),
        ),
    }
}
