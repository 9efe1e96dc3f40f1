//! Schema validation of a written custom resource, and what happens to fields its schema does
//! not declare (`fieldValidation`, or always an error for server-side apply).

use super::{FieldValidation, Ownership, WriteOptions};
use crate::cluster::State;
use crate::errors::{ApiError, ApiResult};
use crate::resources::ResourceType;
use serde_json::Value;

impl State {
    /// Schema validation (CRs), pruning, defaulting and unknown-field handling.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::cluster) fn validate(
        &self,
        rt: &ResourceType,
        name: &str,
        obj: Value,
        old: Option<&Value>,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
        ownership: Ownership,
    ) -> ApiResult<Value> {
        let Some(validator) = &rt.validator else {
            return Ok(obj);
        };
        let validated = validator
            .validate_detailed(&obj, old)
            .map_err(|e| ApiError::invalid(&rt.kind, &rt.group, name, &e))?;
        if !validated.unknown_fields.is_empty() {
            if ownership == Ownership::Applied {
                // Server-side apply always rejects fields the schema does not declare.
                let fields: Vec<String> = validated
                    .unknown_fields
                    .iter()
                    .map(|f| format!(".{f}: field not declared in schema"))
                    .collect();
                return Err(ApiError::bad_request(format!(
                    "failed to create typed patch object ({}, Kind={}): {}",
                    rt.api_version(),
                    rt.kind,
                    fields.join(", ")
                )));
            }
            match opts.field_validation {
                FieldValidation::Strict => {
                    let fields: Vec<String> = validated
                        .unknown_fields
                        .iter()
                        .map(|f| format!("unknown field \"{f}\""))
                        .collect();
                    return Err(ApiError::bad_request(format!(
                        "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
                        rt.kind,
                        rt.version,
                        rt.kind,
                        fields.join(", ")
                    )));
                }
                FieldValidation::Warn => {
                    warnings.extend(
                        validated
                            .unknown_fields
                            .iter()
                            .map(|f| format!("unknown field \"{f}\"")),
                    );
                }
                FieldValidation::Ignore => {}
            }
        }
        Ok(validated.object)
    }
}
