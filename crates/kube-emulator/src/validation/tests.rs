use super::*;
use serde_json::json;

fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.dev"},
        "spec": {
            "group": "example.dev",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": {
                            "type": "object",
                            "required": ["zone"],
                            "x-kubernetes-validations": [
                                {"rule": "self.zone == oldSelf.zone", "message": "zone is immutable", "fieldPath": ".zone"},
                                {"rule": "has(self.vertex) != has(self.tpuVm)", "message": "exactly one of vertex or tpuVm must be set"}
                            ],
                            "properties": {
                                "zone": {"type": "string", "pattern": "^[a-z]+-[a-z]+[0-9]-[a-z]$"},
                                "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
                                "capacity": {"type": "string", "enum": ["onDemand", "spot"]},
                                "size": {"x-kubernetes-int-or-string": true},
                                "note": {"type": "string", "nullable": true},
                                "vertex": {
                                    "type": "object",
                                    "properties": {"machineType": {"type": "string"}},
                                    "x-kubernetes-validations": [{
                                        "rule": "self.machineType.startsWith('ct')",
                                        "messageExpression": "'machine type ' + self.machineType + ' is not a TPU machine'",
                                        "fieldPath": ".machineType"
                                    }]
                                },
                                "tpuVm": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                "items": {
                                    "type": "array", "maxItems": 3,
                                    "items": {"type": "object", "properties": {"n": {"type": "integer"}},
                                              "x-kubernetes-validations": [{"rule": "self.n > 0", "reason": "FieldValueForbidden", "message": "n must be positive"}]}
                                }
                            }
                        },
                        "status": {
                            "type": "object",
                            "properties": {"conditions": {
                                "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                                "items": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}
                            }}
                        }
                    }
                }}
            }]
        }
    })
}

fn widget(spec: Value) -> Value {
    json!({"apiVersion": "example.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
}

fn validator() -> CrdValidator {
    CrdValidator::new(&crd(), "v1").expect("validator builds")
}

fn fields(err: &Invalid) -> Vec<&str> {
    err.causes.iter().map(|c| c.field.as_str()).collect()
}

#[test]
fn accepts_valid_object_prunes_and_defaults() {
    let obj = widget(
        json!({"zone": "us-central2-b", "vertex": {"machineType": "ct5lp"}, "bogus": 1, "note": null, "size": "50%"}),
    );
    let out = validator().validate_detailed(&obj, None).expect("valid");
    assert_eq!(out.object["spec"]["replicas"], 1);
    assert!(out.object["spec"].get("bogus").is_none());
    assert_eq!(out.object["spec"]["note"], Value::Null);
    assert_eq!(out.unknown_fields, vec!["spec.bogus"]);
}

#[test]
fn pattern_errors_use_the_apiserver_wording() {
    let obj = widget(json!({"zone": "x", "vertex": {"machineType": "ct5"}}));
    let err = validator().validate(&obj, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.zone: Invalid value: \"x\": spec.zone in body should match '^[a-z]+-[a-z]+[0-9]-[a-z]$'"
    );
    assert_eq!(err.causes[0].reason(), "FieldValueInvalid");
}

#[test]
fn required_enum_range_and_type_errors_name_their_fields() {
    let obj = widget(json!({"capacity": "cheap", "replicas": 11, "vertex": {"machineType": "ct5"}}));
    let err = validator().validate(&obj, None).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("spec.zone: Required value"), "{text}");
    assert!(
        text.contains(
            "spec.capacity: Unsupported value: \"cheap\": supported values: \"onDemand\", \"spot\""
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"
        ),
        "{text}"
    );

    let obj = widget(json!({"zone": "us-central2-b", "replicas": "two", "vertex": {"machineType": "ct5"}}));
    let err = validator().validate(&obj, None).unwrap_err();
    assert_eq!(fields(&err), vec!["spec.replicas", "<nil>"], "{err}");
    assert!(
        err.to_string()
            .contains("spec.replicas in body must be of type integer: \"string\""),
        "{err}"
    );
}

#[test]
fn cel_rules_report_field_paths_and_message_expressions() {
    let obj = widget(json!({"zone": "us-central2-b", "vertex": {"machineType": "n1-standard"}, "tpuVm": {}}));
    let err = validator().validate(&obj, None).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("spec: Invalid value: exactly one of vertex or tpuVm must be set"),
        "{text}"
    );
    assert!(
        text.contains(
            "spec.vertex.machineType: Invalid value: machine type n1-standard is not a TPU machine"
        ),
        "{text}"
    );

    let obj = widget(json!({"zone": "us-central2-b", "tpuVm": {}, "items": [{"n": 1}, {"n": 0}]}));
    let err = validator().validate(&obj, None).unwrap_err();
    assert_eq!(err.to_string(), "spec.items[1]: Forbidden: n must be positive");
    assert_eq!(err.causes[0].reason(), "FieldValueForbidden");
}

#[test]
fn transition_rules_run_only_on_update() {
    let v = validator();
    let old = widget(json!({"zone": "us-central2-b", "tpuVm": {}}));
    let new = widget(json!({"zone": "us-east1-c", "tpuVm": {}}));
    assert!(v.validate(&new, None).is_ok());
    let err = v.validate(&new, Some(&old)).unwrap_err();
    assert_eq!(err.to_string(), "spec.zone: Invalid value: zone is immutable");
}

#[test]
fn ratcheting_ignores_unchanged_invalid_values() {
    let v = validator();
    // Stored before a rule tightened: the unchanged bad zone does not block an unrelated update.
    let old = widget(json!({"zone": "BAD", "tpuVm": {}}));
    let new = widget(json!({"zone": "BAD", "tpuVm": {}, "replicas": 2}));
    assert!(v.validate(&new, Some(&old)).is_ok());
    let changed = widget(json!({"zone": "WORSE", "tpuVm": {}}));
    assert!(v.validate(&changed, Some(&old)).is_err());
}

#[test]
fn list_map_keys_must_be_unique() {
    let mut obj = widget(json!({"zone": "us-central2-b", "tpuVm": {}}));
    obj["status"] = json!({"conditions": [{"type": "Ready"}, {"type": "Ready", "status": "True"}]});
    let err = validator().validate(&obj, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "status.conditions[1]: Duplicate value: {\"type\":\"Ready\"}"
    );
}

#[test]
fn bad_rules_and_missing_versions_fail_to_build() {
    let mut bad = crd();
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] =
        json!([{"rule": "self.(("}]);
    assert!(
        CrdValidator::new(&bad, "v1")
            .unwrap_err()
            .contains("x-kubernetes-validations")
    );
    assert!(
        CrdValidator::new(&crd(), "v2")
            .unwrap_err()
            .contains("no version \"v2\"")
    );
}

#[test]
fn validator_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CrdValidator>();
}
