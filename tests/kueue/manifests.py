#!/usr/bin/env python3
"""Renders the Kueue install that tests/kueue/up.sh applies, from the copies build.sh took out of
the Kueue module (so the manifests always match the binary), the way Kueue's config/default
kustomization would, with two differences that a loopback-only control plane needs:

- Every webhook clientConfig (admission and CRD conversion) names the Service
  kueue-system/kueue-webhook-service as the released manifests do, but that Service is of type
  ExternalName pointing at 127.0.0.1, and clientConfig.service.port is the manager's webhook port.
  kube-apiserver resolves an ExternalName service to https://<externalName>:<clientConfig port>
  (k8s.io/apiserver/pkg/util/proxy/proxy.go, ResolveCluster) and still verifies the serving
  certificate against <service>.<namespace>.svc (pkg/util/webhook/client.go), which is the name
  Kueue's internal cert management issues its certificate for. So Kueue's own cert rotation and CA
  injection run unchanged; no certificate is made here.
- Only the webhooks for Kueue's own API group (kueue.x-k8s.io) are installed. The others (Pods,
  Jobs, Deployments, the Kubeflow/Ray kinds ...) intercept objects of integrations this harness does
  not use; with failurePolicy Fail they would make every Pod/Job create in the test cluster depend
  on the Kueue manager.

Usage: manifests.py CACHE_DIR NAMESPACE WEBHOOK_PORT CRD_NAMES_FILE > install.yaml
(CRD_NAMES_FILE gets one `crd/NAME` a line, for `kubectl wait`.)
"""
import os
import sys

import yaml

# libyaml when PyYAML has it: the workloads CRD is ~1.5 MB, which the pure-Python parser takes
# seconds over.
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

cache, namespace, port, names_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
prefix = "kueue-"  # config/default/kustomization.yaml: namePrefix
service = prefix + "webhook-service"
secret = prefix + "webhook-server-cert"


def service_ref(path):
    return {"namespace": namespace, "name": service, "path": path, "port": port}


docs = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    # Kueue's cert rotator only updates this Secret; it never creates it (config/components/internalcert).
    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": namespace}},
    {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service, "namespace": namespace},
        "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
    },
]

# CRDs, with the conversion webhook patches that config/components/crd/kustomization.yaml enables.
crd_dir = os.path.join(cache, "crd")
with open(os.path.join(crd_dir, "kustomization.yaml")) as f:
    kustomization = yaml.load(f, Loader=Loader)
conversion = {}
for patch in kustomization.get("patches") or []:
    with open(os.path.join(crd_dir, patch["path"])) as f:
        p = yaml.load(f, Loader=Loader)
    webhook = p["spec"]["conversion"]["webhook"]
    webhook["clientConfig"]["service"] = service_ref(webhook["clientConfig"]["service"]["path"])
    conversion[p["metadata"]["name"]] = p["spec"]["conversion"]
for res in kustomization["resources"]:
    with open(os.path.join(crd_dir, res)) as f:
        crd = yaml.load(f, Loader=Loader)
    if crd["metadata"]["name"] in conversion:
        crd["spec"]["conversion"] = conversion[crd["metadata"]["name"]]
    docs.append(crd)

with open(os.path.join(cache, "webhook", "manifests.yaml")) as f:
    for config in yaml.load_all(f, Loader=Loader):
        if not config:
            continue
        config["metadata"]["name"] = prefix + config["metadata"]["name"]
        hooks = []
        for hook in config["webhooks"]:
            groups = {g for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}
            if groups != {"kueue.x-k8s.io"}:
                continue
            hook["clientConfig"]["service"] = service_ref(hook["clientConfig"]["service"]["path"])
            hooks.append(hook)
        config["webhooks"] = hooks
        docs.append(config)

yaml.dump_all(docs, sys.stdout, Dumper=Dumper, sort_keys=False)
with open(names_file, "w") as f:
    for d in docs:
        if d["kind"] == "CustomResourceDefinition":
            print("crd/" + d["metadata"]["name"], file=f)
