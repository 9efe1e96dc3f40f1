#!/usr/bin/env python3
"""Generate crates/gcp-emulator/schemas/*.json from the discovery documents in ../shared/gcp-api.

Only the schemas reachable from the resources the emulator serves are kept, and each property is
reduced to what request validation and enum re-encoding need:
  type, format, $ref, items, additionalProperties, enum names, "ro" (output only),
  "req" (description starts with "Required."), "nums" (enum name -> proto number).
Enum numbers come from enum-numbers.json (matched by the set of names, preferring the proto enum
whose path mentions the schema and property); unmatched enums fall back to declaration order.

Usage: python3 scripts/trim-schemas.py [path/to/shared/gcp-api]   (default ../../../shared/gcp-api)
"""
import json, os, sys

here = os.path.dirname(os.path.abspath(__file__))
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "..", "..", "shared", "gcp-api")
out = os.path.join(here, "..", "schemas")
enums = json.load(open(os.path.join(src, "enum-numbers.json")))["enums"]

SERVICES = {
    "tpu": ("tpu.v2.json", ".google.cloud.tpu.v2.", "",
            ["Node", "QueuedResource", "StopNodeRequest", "StartNodeRequest", "ResetQueuedResourceRequest",
             "GetGuestAttributesRequest", "Operation", "OperationMetadata", "AcceleratorType", "RuntimeVersion"]),
    "dataproc": ("dataproc.v1.json", ".google.cloud.dataproc.v1.", "",
                 ["Batch", "BatchOperationMetadata", "Operation"]),
    "vertex": ("aiplatform.v1.json", ".google.cloud.aiplatform.v1.", "GoogleCloudAiplatformV1",
               ["GoogleCloudAiplatformV1CustomJob", "GoogleCloudAiplatformV1CancelCustomJobRequest",
                "GoogleCloudAiplatformV1DeleteOperationMetadata", "GoogleLongrunningOperation"]),
    "storage": ("storage.v1.json", None, "", ["Object", "Objects", "Bucket"]),
    # v2alpha1-only request bodies (nodes.performMaintenance, nodes.simulateMaintenanceEvent); the
    # emulator merges them into the TPU schemas, the same node store serving both versions.
    "tpu-v2alpha1": ("tpu.v2alpha1.json", ".google.cloud.tpu.v2alpha1.", "",
                     ["PerformMaintenanceRequest", "SimulateMaintenanceEventRequest"]),
}


def pick_enum(proto_prefix, strip, schema_name, prop, names):
    if proto_prefix is None:
        return None
    want = set(names)
    cands = [k for k, v in enums.items() if set(v) == want and (k.startswith(proto_prefix) or k == ".google.rpc.Code")]
    if not cands:
        return None
    short = schema_name[len(strip):] if schema_name.startswith(strip) else schema_name
    def score(k):
        s = 0
        if ("." + short + ".") in k or k.endswith("." + short):
            s += 2
        if k.lower().endswith(prop.lower()):
            s += 1
        return s
    cands.sort(key=score, reverse=True)
    return enums[cands[0]]


def trim_prop(p, proto_prefix, strip, schema_name, prop_name, warnings):
    o = {}
    for k in ("type", "format", "$ref"):
        if k in p:
            o[k] = p[k]
    if p.get("readOnly"):
        o["ro"] = True
    if (p.get("description") or "").startswith("Required."):
        o["req"] = True
    if "enum" in p:
        names = p["enum"]
        nums = pick_enum(proto_prefix, strip, schema_name, prop_name, names)
        if nums is None:
            if proto_prefix is not None:
                warnings.append(f"{schema_name}.{prop_name}: no proto enum matched; using declaration order")
            nums = {n: i for i, n in enumerate(names)}
        o["enum"] = names
        o["nums"] = {n: nums[n] for n in names if n in nums}
    if "items" in p:
        o["items"] = trim_prop(p["items"], proto_prefix, strip, schema_name, prop_name, warnings)
    if "additionalProperties" in p:
        o["additionalProperties"] = trim_prop(p["additionalProperties"], proto_prefix, strip, schema_name,
                                              prop_name, warnings)
    return o


def refs(p):
    if "$ref" in p:
        yield p["$ref"]
    for k in ("items", "additionalProperties"):
        if k in p:
            yield from refs(p[k])


for svc, (fname, proto_prefix, strip, roots) in SERVICES.items():
    doc = json.load(open(os.path.join(src, fname)))
    schemas = doc["schemas"]
    seen, todo = set(), list(roots)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for p in schemas[n].get("properties", {}).values():
            todo.extend(refs(p))
    warnings = []
    trimmed = {}
    for n in sorted(seen):
        props = schemas[n].get("properties", {})
        trimmed[n] = {k: trim_prop(v, proto_prefix, strip, n, k, warnings) for k, v in sorted(props.items())}
    result = {"source": f"{fname} ({doc.get('revision')})", "schemas": trimmed}
    with open(os.path.join(out, f"{svc}.json"), "w") as f:
        json.dump(result, f, separators=(",", ":"), sort_keys=True)
        f.write("\n")
    print(f"{svc}: {len(trimmed)} schemas", *warnings, sep="\n  ")
