#!/usr/bin/env bash
# Runs the real Kueue manager (built from its Go module by build.sh, cached) against a running
# control plane (tests/control-plane/up.sh), the way Kueue's released manifests install it: its
# CRDs with the conversion webhooks, its own admission webhooks, internal cert management (Kueue
# generates its CA and serving certificate and injects the CA into the webhook configurations and
# CRDs itself). The manager runs on this machine, not in a Pod: manifests.py points the webhook
# Service at it (an ExternalName service for 127.0.0.1; see there why that is faithful).
#
# Usage (KUBECONFIG must name the running control plane; it is the manager's identity too):
#   up.sh run -- CMD [ARGS...]  install + start, run CMD with TPU_OPERATOR_KUEUE_DIR set, stop;
#                               exits with CMD's status
#   up.sh start                 install + start in the background; prints `export ...` lines
#                               (TPU_OPERATOR_KUEUE_DIR) for `eval`
#   up.sh stop [DIR]            stop the manager `start` started (DIR defaults to $TPU_OPERATOR_KUEUE_DIR)
#
# Environment:
#   TPU_OPERATOR_KUEUE_BIN        use the kueue binary (and the manifests beside it) from this folder
#                                 instead of running build.sh
#   TPU_OPERATOR_KUEUE_KEEP=1     keep the state folder (config, log, certificates) on stop
#   TPU_OPERATOR_KUEUE_EXTERNAL_FRAMEWORKS  comma-separated Kind.version.group list for
#                                 integrations.externalFrameworks (default: the operator's TpuSlice
#                                 and TrainingPipeline)
#   TPU_OPERATOR_KUEUE_FEATURE_GATES  featureGates lines for the Configuration, `Name: bool`
#                                 separated by commas (e.g. "PartialAdmission: false"); replaces
#                                 the default "VisibilityOnDemand: false"
#   TPU_OPERATOR_KUEUE_VISIBILITY=1  also serve the visibility API (visibility.kueue.x-k8s.io,
#                                 pending workloads with positions) through API aggregation: turns
#                                 VisibilityOnDemand on and registers the APIService (removed again
#                                 on stop). Needs the control plane's front-proxy client
#                                 certificate; Kueue writes its serving cert to /visibility.
#
# The cluster-scoped install (CRDs, webhook configurations, the kueue-system namespace) stays in the
# cluster after `stop`; the control plane is thrown away as a whole. A second `start` on the same
# cluster re-applies it and works.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mode="${1:-}"
[ "$#" -gt 0 ] && shift

log() { echo "kueue: $*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop_dir() {
  local dir="$1" pid
  [ -f "$dir/pid" ] || { log "no pid file in $dir; nothing to stop"; return 0; }
  pid="$(cat "$dir/pid")"
  # An APIService whose backend is gone breaks API discovery for every client of the cluster.
  if [ -f "$dir/apiservices" ]; then
    KUBECONFIG="$(cat "$dir/kubeconfig-path")" "$(cat "$dir/kubectl-path")" delete --ignore-not-found \
      $(cat "$dir/apiservices") >/dev/null 2>&1 || log "could not delete $(cat "$dir/apiservices")"
  fi
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/pid"
  if [ "${TPU_OPERATOR_KUEUE_KEEP:-0}" = 1 ]; then
    log "stopped; state kept in $dir"
  else
    rm -rf "$dir"
  fi
}

case "$mode" in
  stop)
    dir="${1:-${TPU_OPERATOR_KUEUE_DIR:-}}"
    [ -n "$dir" ] || { log "stop: give the state folder or set TPU_OPERATOR_KUEUE_DIR"; exit 2; }
    stop_dir "$dir"
    exit 0
    ;;
  run)
    [ "${1:-}" = -- ] && shift
    [ "$#" -gt 0 ] || { log "run: give a command after --"; exit 2; }
    ;;
  start) ;;
  *)
    log "unknown mode '$mode' (run -- CMD... | start | stop [DIR])"
    exit 2
    ;;
esac

[ -n "${KUBECONFIG:-}" ] && [ -f "$KUBECONFIG" ] || {
  log "KUBECONFIG must name the kubeconfig of a running control plane (tests/control-plane/up.sh start)"
  exit 2
}
# kubectl: the one the repo's test-tools crate installs, else any on PATH.
kubectl="$HOME/.cache/tpu-operator/tools/bin/kubectl"
[ -x "$kubectl" ] || kubectl="$(command -v kubectl || true)"
[ -n "$kubectl" ] || { log "kubectl not found (~/.cache/tpu-operator/tools/bin/kubectl or PATH; scripts/install-tools.sh)"; exit 2; }
python3 -c 'import yaml' 2>/dev/null || { log "python3 with PyYAML is needed to render the install (apt-get install python3-yaml)"; exit 2; }

t0=$(date +%s.%N)
bin="${TPU_OPERATOR_KUEUE_BIN:-$("$here/build.sh")}"
[ -x "$bin/kueue" ] || { log "$bin/kueue missing (run tests/kueue/build.sh)"; exit 2; }
cache="$(dirname "$bin")"
t_built=$(date +%s.%N)

dir="$(mktemp -d "${TMPDIR:-/tmp}/tpu-operator-kueue.XXXXXX")"
mkdir -p "$dir/certs"
if [ "$mode" != start ]; then
  trap 'stop_dir "$dir"' EXIT
  trap 'exit 130' INT TERM
fi
fail() {
  log "$1; last log lines:"
  tail -n 30 "$dir/kueue.log" >&2 || true
  [ "$mode" = start ] && stop_dir "$dir"
  exit 1
}

namespace=kueue-system
webhook_port=$(free_port)
health_port=$(free_port)
metrics_port=$(free_port)
visibility_port=$(free_port)

# --- install: namespace, cert Secret, webhook Service, CRDs, webhook configurations -------------
python3 "$here/manifests.py" "$cache" "$namespace" "$webhook_port" "$dir/crds" >"$dir/install.yaml"
# Server-side apply: the workloads CRD (~1.5 MB) is far larger than the 256 KiB that client-side
# apply's last-applied annotation may hold.
"$kubectl" apply --server-side --force-conflicts --field-manager=tpu-operator-kueue-harness \
  -f "$dir/install.yaml" >"$dir/apply.log" 2>&1 || { cat "$dir/apply.log" >&2; fail "applying Kueue's manifests failed"; }
# shellcheck disable=SC2086 # one word per CRD
"$kubectl" wait --for=condition=Established --timeout=60s $(cat "$dir/crds") >/dev/null || fail "Kueue's CRDs not Established"
t_installed=$(date +%s.%N)

# --- Configuration (config.kueue.x-k8s.io/v1beta2, apis/config/v1beta2/configuration_types.go) ---
# integrations.frameworks cannot be empty: SetDefaults_Configuration turns an empty list into
# ["batch/job"], so it is spelled out here. With manageJobsWithoutQueueName false (the default) that
# integration only touches Jobs labelled kueue.x-k8s.io/queue-name; its webhooks are not installed.
# externalFrameworks ("Kind.version.group", parsed by schema.ParseKindArg) make Kueue treat an object
# owned by such a kind as managed by its parent (pkg/controller/jobframework/integrationmanager.go,
# getJobTypeForOwner); the Workloads themselves are written by the owner's controller.
# VisibilityOnDemand is off by default: its aggregated API server wants a /visibility cert folder
# and an APIService the control plane cannot route to without front-proxy client certificates
# (README.md, "Visibility API").
frameworks="${TPU_OPERATOR_KUEUE_EXTERNAL_FRAMEWORKS:-TpuSlice.v1beta1.tpu-operator.dev,TrainingPipeline.v1beta1.tpu-operator.dev,TpuSlice.v1alpha1.tpu-operator.dev,TrainingPipeline.v1alpha1.tpu-operator.dev}"
external=""
IFS=',' read -ra fws <<<"$frameworks"
for fw in "${fws[@]}"; do external+="
  - \"$fw\""; done
gates="VisibilityOnDemand: false"
[ -n "${TPU_OPERATOR_KUEUE_FEATURE_GATES:-}" ] && gates="${TPU_OPERATOR_KUEUE_FEATURE_GATES}"
visibility="${TPU_OPERATOR_KUEUE_VISIBILITY:-0}"
[ "$visibility" = 1 ] && gates="VisibilityOnDemand: true${TPU_OPERATOR_KUEUE_FEATURE_GATES:+,$TPU_OPERATOR_KUEUE_FEATURE_GATES}"
gate_lines=""
IFS=',' read -ra gl <<<"$gates"
for g in "${gl[@]}"; do gate_lines+="
  ${g# }"; done
cat >"$dir/config.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: $namespace
health:
  healthProbeBindAddress: 127.0.0.1:$health_port
metrics:
  bindAddress: 127.0.0.1:$metrics_port
webhook:
  host: 127.0.0.1
  port: $webhook_port
  certDir: $dir/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
  webhookServiceName: kueue-webhook-service
  webhookSecretName: kueue-webhook-server-cert
visibilityServer:
  bindAddress: 127.0.0.1
  bindPort: $visibility_port
featureGates:$gate_lines
integrations:
  frameworks:
  - "batch/job"
  externalFrameworks:$external
EOF

# --- the manager ---------------------------------------------------------------------------------
# setsid: a background `start` must outlive this script and must not get the caller's Ctrl-C.
# --kubeconfig (controller-runtime's flag) rather than only $KUBECONFIG: the visibility server's
# delegated authentication reads the flag.
setsid "$bin/kueue" --config="$dir/config.yaml" --kubeconfig="$KUBECONFIG" \
  --visibility-server-port="$visibility_port" >"$dir/kueue.log" 2>&1 </dev/null &
echo $! >"$dir/pid"
pid=$(cat "$dir/pid")

# Kueue's cert rotator keeps the serving certificate in the Secret kueue-webhook-server-cert and
# waits for it to appear in webhook.certDir (cert-controller's ensureCertsMounted), where the
# kubelet's Secret volume would put it in a Pod. No kubelet here: this loop does the kubelet's part,
# copying tls.crt/tls.key whenever they differ from the Secret (the rotator may rewrite the Secret
# once more after a conflict during its first seconds; controller-runtime's cert watcher reloads).
sync_certs() {
  local data
  data="$("$kubectl" -n "$namespace" get secret kueue-webhook-server-cert -o jsonpath='{.data.tls\.crt} {.data.tls\.key}' 2>/dev/null)" || return 0
  set -- $data
  [ "$#" = 2 ] || return 0
  [ "$(cat "$dir/certs/.synced" 2>/dev/null)" = "$data" ] && return 0
  echo "$2" | base64 -d >"$dir/certs/tls.key.tmp" && mv "$dir/certs/tls.key.tmp" "$dir/certs/tls.key"
  echo "$1" | base64 -d >"$dir/certs/tls.crt.tmp" && mv "$dir/certs/tls.crt.tmp" "$dir/certs/tls.crt"
  echo "$data" >"$dir/certs/.synced"
}
# readyz answers once the webhook server listens with its certificates (cmd/kueue/main.go,
# setupProbeEndpoints); before the manager starts, BootstrapCerts has already waited for the CA to
# be injected into the webhook configurations and CRDs (pkg/util/cert/cert.go). Then, end to end
# through the apiserver: a server-side dry run passes Kueue's mutating and validating webhooks for
# ResourceFlavor, so it fails until the apiserver reaches the manager over TLS with the injected CA.
probe="apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: tpu-operator-kueue-probe"
deadline=$(($(date +%s) + 120))
until curl -sf "http://127.0.0.1:$health_port/readyz" >/dev/null 2>&1 &&
  echo "$probe" | "$kubectl" create --dry-run=server -f - >"$dir/probe.log" 2>&1; do
  kill -0 "$pid" 2>/dev/null || fail "the kueue manager exited during start-up"
  [ "$(date +%s)" -lt "$deadline" ] || { cat "$dir/probe.log" >&2 2>/dev/null; fail "the kueue manager not ready (readyz and a webhook call through the apiserver) after 120s"; }
  sync_certs
  sleep 0.3
done
sync_certs

# --- visibility API (opt-in) ---------------------------------------------------------------------
# As config/components/visibility (apiservice_v1beta2.yaml, service.yaml) registers it, with the
# Service again an ExternalName for 127.0.0.1: the aggregator resolves it with the same
# ResolveCluster as webhooks, to https://127.0.0.1:<APIService service.port>. Kueue serves it with a
# self-signed certificate, hence insecureSkipTLSVerify as in the released manifest.
if [ "$visibility" = 1 ]; then
  echo "$KUBECONFIG" >"$dir/kubeconfig-path"
  echo "$kubectl" >"$dir/kubectl-path"
  echo "apiservice/v1beta2.visibility.kueue.x-k8s.io" >"$dir/apiservices"
  cat >"$dir/visibility.yaml" <<EOF
apiVersion: v1
kind: Service
metadata:
  name: visibility-server
  namespace: $namespace
spec:
  type: ExternalName
  externalName: 127.0.0.1
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta2.visibility.kueue.x-k8s.io
spec:
  group: visibility.kueue.x-k8s.io
  version: v1beta2
  groupPriorityMinimum: 100
  versionPriority: 100
  insecureSkipTLSVerify: true
  service:
    name: visibility-server
    namespace: $namespace
    port: $visibility_port
EOF
  "$kubectl" apply --server-side --force-conflicts --field-manager=tpu-operator-kueue-harness \
    -f "$dir/visibility.yaml" >>"$dir/apply.log" 2>&1 || { cat "$dir/apply.log" >&2; fail "registering the visibility APIService failed"; }
  if ! "$kubectl" wait --for=condition=Available --timeout=60s apiservice/v1beta2.visibility.kueue.x-k8s.io >/dev/null 2>&1; then
    "$kubectl" get apiservice v1beta2.visibility.kueue.x-k8s.io -o jsonpath='{.status.conditions[0].message}' >&2 || true
    echo >&2
    fail "the visibility APIService is not Available (a 403 there means kube-apiserver has no --proxy-client-cert-file)"
  fi
fi
t_ready=$(date +%s.%N)

timing="$(awk -v a="$t0" -v b="$t_built" -v i="$t_installed" -v r="$t_ready" 'BEGIN {
  printf "build/cache lookup %.1fs, install %.1fs, manager ready (webhooks reachable) %.1fs, total start-up %.1fs",
    b-a, i-b, r-i, r-b }')"
echo "$timing" >"$dir/startup-time"
log "$(cat "$cache/version" 2>/dev/null || echo kueue) up, webhooks on 127.0.0.1:$webhook_port ($timing)"

exports="export TPU_OPERATOR_KUEUE_DIR=$dir"
case "$mode" in
  start)
    echo "$exports"
    ;;
  run)
    set +e
    TPU_OPERATOR_KUEUE_DIR="$dir" "$@"
    status=$?
    set -e
    if [ "$status" != 0 ]; then
      log "last lines of the manager's log (errors):"
      grep -E '"level":"(error|warn)"|^E' "$dir/kueue.log" | tail -n 20 >&2 || true
      log "command failed ($status); set TPU_OPERATOR_KUEUE_KEEP=1 to keep $dir"
    fi
    exit "$status"
    ;;
esac
