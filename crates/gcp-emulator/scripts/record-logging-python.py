#!/usr/bin/env python3
"""Records what Google's Python Cloud Logging client (`google-cloud-logging`, REST transport)
sends to and gets back from gcp-emulator, into tests/golden/logging/python-client.json.

The recording is replayed by tests/logging_python.rs: the emulator must keep answering those
requests the way the client expects (status, reply shape). Re-record after changing the
emulator's Logging surface:

    python3 -m venv /tmp/pylog && /tmp/pylog/bin/pip install google-cloud-logging
    cargo run -p gcp-emulator -- --listen 127.0.0.1:8085 &
    /tmp/pylog/bin/python crates/gcp-emulator/scripts/record-logging-python.py http://127.0.0.1:8085

The script also checks what the client made of the replies (entries, severities, pages), so a
recording is only written when the client understood the emulator.
"""
import json, os, sys

import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import logging as cloud_logging
from google.cloud.logging import Resource

base = sys.argv[1].rstrip("/") if len(sys.argv) > 1 else "http://127.0.0.1:8085"
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden", "logging", "python-client.json")
calls = []


class Recording(requests.Session):
    def request(self, method, url, data=None, headers=None, **kw):
        reply = super().request(method, url, data=data, headers=headers, **kw)
        body = data.decode() if isinstance(data, bytes) else data
        calls.append({
            "method": method,
            "path": url[len(base):],
            "request": json.loads(body) if body else None,
            "status": reply.status_code,
            "response": reply.json() if reply.content else None,
        })
        return reply


client = cloud_logging.Client(
    project="py-proj",
    credentials=AnonymousCredentials(),
    _http=Recording(),
    _use_grpc=False,
    client_options={"api_endpoint": base + "/logging"},
)
logger = client.logger("trainer")
vm = Resource(type="gce_instance", labels={"instance_id": "42", "zone": "us-east5-b"})
logger.log_text("step 100", severity="INFO", resource=vm, labels={"attempt": "1"})
logger.log_struct({"message": "RuntimeError: boom", "step": 101}, severity="ERROR", resource=vm)

query = 'resource.type="gce_instance" AND labels.attempt="1"'
got = list(client.list_entries(resource_names=["projects/py-proj"], filter_=query))
assert [e.payload for e in got] == ["step 100"], got
newest = list(client.list_entries(
    resource_names=["projects/py-proj"], filter_='severity>=ERROR', order_by=cloud_logging.DESCENDING))
assert len(newest) == 1 and newest[0].payload["message"] == "RuntimeError: boom", newest
assert newest[0].severity == "ERROR", newest[0].severity
before = len(calls)
paged = list(client.list_entries(resource_names=["projects/py-proj"], page_size=1))
# The client's first write also sends its instrumentation entry
# (`logging.googleapis.com/diagnostic`): three entries in all, one request per page of one.
assert len(paged) == 3, paged
assert len(calls) - before == 3, calls[before:]
assert calls[-1]["request"].get("pageToken"), calls[-1]

os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out, "w") as f:
    json.dump({
        "client": "google-cloud-logging " + getattr(cloud_logging, "__version__", "?"),
        "calls": calls,
    }, f, indent=2, sort_keys=True)
    f.write("\n")
print(f"recorded {len(calls)} calls into {out}")
