#!/usr/bin/env python3
"""Trims the Compute Engine v1 discovery document (/work/shared/gcp-api/compute.v1.json, see its
PROVENANCE.md) to the schemas the emulator validates, in the format of schemas/*.json: per
property its type, format, $ref, items, additionalProperties, enum names and `ro` (output only,
from "[Output Only]" / "Output only" in the description). Compute enums carry no proto numbers.

    python3 schemas/trim-compute.py /work/shared/gcp-api/compute.v1.json > schemas/compute.json
"""
import json
import sys

ROOTS = ["Instance", "InstanceTemplate", "ResourcePolicy", "InstanceGroupManager",
         "InstanceGroupManagerResizeRequest", "Operation"]

doc = json.load(open(sys.argv[1]))
schemas = doc["schemas"]
out = {}


def prop(p):
    q = {}
    for k in ("type", "format", "$ref"):
        if k in p:
            q[k] = p[k]
    if "enum" in p:
        q["enum"] = p["enum"]
    d = p.get("description", "")
    if "[Output Only]" in d or "Output only" in d or "[Output only]" in d:
        q["ro"] = True
    if "items" in p:
        q["items"] = prop(p["items"])
    if "additionalProperties" in p:
        q["additionalProperties"] = prop(p["additionalProperties"])
    return q


def refs(p):
    if "$ref" in p:
        yield p["$ref"]
    for k in ("items", "additionalProperties"):
        if k in p:
            yield from refs(p[k])


todo = list(ROOTS)
while todo:
    name = todo.pop()
    if name in out:
        continue
    props = schemas[name].get("properties", {})
    out[name] = {k: prop(v) for k, v in props.items()}
    for v in props.values():
        todo.extend(refs(v))

json.dump({"schemas": out}, sys.stdout, sort_keys=True, separators=(",", ":"))
