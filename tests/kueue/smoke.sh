#!/usr/bin/env bash
# Smoke test of the real Kueue manager against the real control plane, acting as an external
# framework's controller would (the Workloads are written by hand; ConfigMaps stand in for the
# owning TpuSlices). Checks, in order, with one ClusterQueue of 8 google.com/tpu:
#   1. a Workload of 2 pods x 4 TPU is admitted (QuotaReserved + Admitted, status.admission);
#   2. a second one stays pending (QuotaReserved False, reason Pending, with a message);
#   3. deleting the first admits the second;
#   4. a higher-priority Workload (WorkloadPriorityClass) preempts it: Kueue sets Evicted/Preempted
#      but keeps the quota reserved until the owner has stopped and clears status.admission, as
#      Kueue's own jobframework reconciler does for built-in jobs;
#   5. spec.active=false evicts with reason Deactivated, again released by the owner;
#   6. the owner setting Finished=True releases the quota;
#   7. partial admission: minCount lets a 3-pod Workload in with 2 pods.
# Every step's Workload status is written to $TPU_OPERATOR_KUEUE_SMOKE_OUT (default: a temporary
# folder, printed) as YAML, which is what README.md quotes.
#
# Usage: tests/control-plane/up.sh run -- tests/kueue/up.sh run -- tests/kueue/smoke.sh
set -euo pipefail
kubectl="$HOME/.cache/tpu-operator/tools/bin/kubectl"
[ -x "$kubectl" ] || kubectl="$(command -v kubectl)"
out="${TPU_OPERATOR_KUEUE_SMOKE_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/tpu-operator-kueue-smoke.XXXXXX")}"
mkdir -p "$out"
ns="kueue-smoke-$$"
cq="smoke-tpu-$$"
step=0

log() { echo "smoke: $*" >&2; }
die() { log "FAILED: $*"; "$kubectl" -n "$ns" get workloads -o yaml >"$out/failure-workloads.yaml" 2>&1 || true; log "state in $out"; exit 1; }
k() { "$kubectl" -n "$ns" "$@"; }

cond() { # workload type -> "status/reason/message"
  k get workload "$1" -o jsonpath="{.status.conditions[?(@.type==\"$2\")].status}/{.status.conditions[?(@.type==\"$2\")].reason}/{.status.conditions[?(@.type==\"$2\")].message}"
}
wait_cond() { # workload type status [seconds]
  local deadline=$(($(date +%s) + ${4:-30}))
  until [ "$(cond "$1" "$2" | cut -d/ -f1)" = "$3" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || die "$1: condition $2 not $3 after ${4:-30}s (now: $(cond "$1" "$2"))"
    sleep 0.2
  done
}
snap() { # workload label: the object without managedFields, for README.md
  step=$((step + 1))
  k get workload "$1" -o json | python3 -c '
import json, sys, yaml
o = json.load(sys.stdin)
o["metadata"].pop("managedFields", None)
print(yaml.safe_dump(o, sort_keys=False), end="")' >"$out/$(printf %02d $step)-$2.yaml"
}
# What an external framework's controller does once it has stopped its job after Kueue set
# Evicted=True: the same status change as pkg/controller/jobframework/reconciler.go step 6 (clear
# status.admission, QuotaReserved False/Pending, Admitted synced, Requeued True for preemption).
# A merge patch of the status subresource with the whole condition list (CRD status has no
# strategic merge) and the resourceVersion, so a concurrent write by Kueue makes it fail, not lose.
release() { # workload
  local patch
  patch="$(k get workload "$1" -o json | python3 -c '
import datetime, json, sys
wl = json.load(sys.stdin)
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
ev = next(c for c in wl["status"]["conditions"] if c["type"] == "Evicted")
conds = [c for c in wl["status"]["conditions"] if c["type"] not in ("QuotaReserved", "Admitted", "Requeued")]
gen = wl["metadata"]["generation"]
def c(t, s, r, m):
    return {"type": t, "status": s, "reason": r, "message": m, "lastTransitionTime": now, "observedGeneration": gen}
conds.append(c("QuotaReserved", "False", "Pending", ev["message"]))
conds.append(c("Admitted", "False", "NoReservation", "The workload has no reservation"))
conds.append(c("Requeued", "True" if ev["reason"] in ("Preempted", "NodeFailures") else "False", ev["reason"], ev["message"]))
print(json.dumps({"metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]},
                  "status": {"admission": None, "conditions": conds}}))')"
  k patch workload "$1" --subresource=status --type=merge -p "$patch" >/dev/null
}

workload() { # name owner-configmap count tpus-per-pod [priority-class priority] [min-count]
  local name="$1" owner="$2" count="$3" tpus="$4" pc="${5:-}" prio="${6:-}" min="${7:-}" uid
  k create configmap "$owner" >/dev/null 2>&1 || true
  uid="$(k get configmap "$owner" -o jsonpath='{.metadata.uid}')"
  k create -f - >/dev/null <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  name: $name
  ownerReferences:
  - {apiVersion: v1, kind: ConfigMap, name: $owner, uid: $uid, controller: true, blockOwnerDeletion: true}
spec:
  queueName: tpu
$( [ -n "$pc" ] && printf '  priorityClassRef: {group: kueue.x-k8s.io, kind: WorkloadPriorityClass, name: %s}\n  priority: %s\n' "$pc" "$prio")
  podSets:
  - name: workers
    count: $count
$( [ -n "$min" ] && printf '    minCount: %s\n' "$min")
    template:
      spec:
        restartPolicy: Never
        containers:
        - name: trainer
          image: tpu-operator.dev/none
          resources:
            requests: {google.com/tpu: "$tpus"}
            limits: {google.com/tpu: "$tpus"}
EOF
}

cleanup() {
  "$kubectl" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  "$kubectl" delete clusterqueue "$cq" --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

log "queues: ResourceFlavor tpu-v6e, ClusterQueue $cq (8 google.com/tpu), LocalQueue $ns/tpu"
"$kubectl" create namespace "$ns" >/dev/null
"$kubectl" apply --server-side -f - >/dev/null <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: tpu-v6e
spec:
  nodeLabels:
    cloud.google.com/gke-tpu-accelerator: tpu-v6e-slice
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: tpu-low
value: 100
description: smoke test, low
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: tpu-high
value: 1000
description: smoke test, high
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: $cq
spec:
  namespaceSelector: {}
  preemption:
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources: [google.com/tpu]
    flavors:
    - name: tpu-v6e
      resources:
      - name: google.com/tpu
        nominalQuota: 8
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: tpu
  namespace: $ns
spec:
  clusterQueue: $cq
EOF
"$kubectl" wait --for=condition=Active --timeout=30s "clusterqueue/$cq" >/dev/null || die "ClusterQueue not Active"
k wait --for=condition=Active --timeout=30s localqueue/tpu >/dev/null || die "LocalQueue not Active"
"$kubectl" get clusterqueue "$cq" -o yaml >"$out/00-clusterqueue.yaml"

log "1. wl-a (2 x 4 TPU, low) is admitted"
workload wl-a owner-a 2 4 tpu-low 100
wait_cond wl-a QuotaReserved True
wait_cond wl-a Admitted True
[ "$(k get workload wl-a -o jsonpath='{.status.admission.clusterQueue}')" = "$cq" ] || die "wl-a: admission.clusterQueue"
[ "$(k get workload wl-a -o jsonpath='{.status.admission.podSetAssignments[0].flavors.google\.com/tpu}')" = tpu-v6e ] ||
  die "wl-a: podSetAssignments[0].flavors"
snap wl-a admitted

log "2. wl-b (2 x 4 TPU, low) stays pending"
workload wl-b owner-b 2 4 tpu-low 100
wait_cond wl-b QuotaReserved False
sleep 2
[ "$(cond wl-b QuotaReserved | cut -d/ -f1)" = False ] || die "wl-b admitted while wl-a holds the quota"
log "   wl-b: $(cond wl-b QuotaReserved)"
snap wl-b pending
if [ "${TPU_OPERATOR_KUEUE_VISIBILITY:-0}" = 1 ]; then
  log "   visibility API: wl-b is first in the LocalQueue's pending workloads"
  "$kubectl" get --raw "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/$ns/localqueues/tpu/pendingworkloads" \
    >"$out/$(printf %02d $step)-visibility-pendingworkloads.json" || die "visibility API: pendingworkloads"
  python3 -c '
import json, sys
items = json.load(open(sys.argv[1]))["items"]
assert [(i["metadata"]["name"], i["positionInLocalQueue"], i["positionInClusterQueue"]) for i in items] == [("wl-b", 0, 0)], items
' "$out/$(printf %02d $step)-visibility-pendingworkloads.json" || die "visibility API: unexpected pending workloads"
fi

log "3. deleting wl-a admits wl-b"
k delete workload wl-a >/dev/null
wait_cond wl-b Admitted True
snap wl-b admitted-after-delete

log "4. wl-c (2 x 4 TPU, high) preempts wl-b; the quota stays reserved until the owner releases it"
workload wl-c owner-c 2 4 tpu-high 1000
wait_cond wl-b Evicted True
log "   wl-b Evicted: $(cond wl-b Evicted); Preempted: $(cond wl-b Preempted)"
sleep 3
snap wl-b evicted-preempted
snap wl-c pending-while-victim-holds-quota
# The contract an external framework relies on: Kueue only asks (Evicted=True); the victim keeps
# its admission, and so its quota, until its owner says it has stopped.
[ "$(cond wl-b QuotaReserved | cut -d/ -f1)" = True ] && [ "$(cond wl-c QuotaReserved | cut -d/ -f1)" != True ] ||
  die "Kueue released the victim's quota by itself (wl-b QuotaReserved $(cond wl-b QuotaReserved)); wl-c: $(cond wl-c QuotaReserved)"
release wl-b
wait_cond wl-c Admitted True
wait_cond wl-b QuotaReserved False
snap wl-b requeued-after-release
snap wl-c admitted-after-preemption

log "5. spec.active=false on wl-c evicts it (Deactivated); released by the owner, wl-b gets back in"
k patch workload wl-c --type=merge -p '{"spec":{"active":false}}' >/dev/null
wait_cond wl-c Evicted True
log "   wl-c Evicted: $(cond wl-c Evicted)"
sleep 2
snap wl-c evicted-deactivated
release wl-c
wait_cond wl-b Admitted True
snap wl-c deactivated-after-release

log "6. the owner marks wl-b Finished; the quota is free again"
workload wl-d owner-d 2 4 tpu-low 100
wait_cond wl-d QuotaReserved False
# Server-side apply of just the condition this owner owns: conditions is a listType=map keyed by
# type, so Kueue's conditions stay as they are.
k apply --server-side --subresource=status --field-manager=tpu-operator-smoke -f - >/dev/null <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  name: wl-b
status:
  conditions:
  - type: Finished
    status: "True"
    reason: Succeeded
    message: training finished
    lastTransitionTime: "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
EOF
wait_cond wl-d Admitted True
snap wl-b finished
snap wl-d admitted-after-finish

log "7. partial admission: wl-p (3 x 4 TPU, minCount 1) gets 2 pods once wl-d is finished"
k apply --server-side --subresource=status --field-manager=tpu-operator-smoke -f - >/dev/null <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  name: wl-d
status:
  conditions:
  - type: Finished
    status: "True"
    reason: Succeeded
    message: done
    lastTransitionTime: "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
EOF
workload wl-p owner-p 3 4 tpu-low 100 1
wait_cond wl-p Admitted True
[ "$(k get workload wl-p -o jsonpath='{.status.admission.podSetAssignments[0].count}')" = 2 ] ||
  die "wl-p: podSetAssignments[0].count is not 2"
snap wl-p partially-admitted

log "8. deleting the owner (ConfigMap) garbage-collects its Workload"
k delete configmap owner-p >/dev/null
deadline=$(($(date +%s) + 30))
while k get workload wl-p >/dev/null 2>&1; do
  [ "$(date +%s)" -lt "$deadline" ] || die "wl-p not garbage-collected after its owner was deleted"
  sleep 0.2
done

"$kubectl" get clusterqueue "$cq" -o yaml >"$out/99-clusterqueue.yaml"
log "passed; statuses in $out"
