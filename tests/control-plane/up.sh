#!/usr/bin/env bash
# Starts a real, throwaway Kubernetes control plane on loopback: etcd, kube-apiserver and
# kube-controller-manager built from Go modules by build.sh (cached). No kubelet, no scheduler: this
# is what controller-runtime's envtest runs, plus the controller-manager for garbage collection and
# namespace deletion.
#
# Usage:
#   up.sh run -- CMD [ARGS...]  start, run CMD with KUBECONFIG and TPU_OPERATOR_KUBE=real set, stop;
#                               exits with CMD's status (what CI uses)
#   up.sh start                 start in the background; prints `export ...` lines (KUBECONFIG,
#                               TPU_OPERATOR_KUBE, TPU_OPERATOR_CONTROL_PLANE_DIR) for `eval`
#   up.sh stop [DIR]            stop what `start` started (DIR defaults to $TPU_OPERATOR_CONTROL_PLANE_DIR)
#   up.sh                       start in the foreground; Ctrl-C stops and cleans up
#
# Environment:
#   TPU_OPERATOR_CONTROL_PLANE_BIN  use binaries from this folder instead of running build.sh
#   TPU_OPERATOR_CONTROL_PLANE_KEEP=1  keep the state folder (logs, certs, etcd data) on stop
#
# Authentication is by client certificate (the admin certificate is in group system:masters),
# authorization is RBAC, exactly as on a kubeadm cluster; kubectl and kube-rs both read the
# kubeconfig written to $DIR/kubeconfig as is.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mode="${1:-foreground}"
[ "$#" -gt 0 ] && shift

log() { echo "control-plane: $*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop_dir() {
  local dir="$1" pid name
  [ -f "$dir/pids" ] || { log "no pid file in $dir; nothing to stop"; return 0; }
  # Reverse start order: controller-manager, apiserver, then etcd, so none logs a storm of errors
  # about the one below it vanishing first.
  for name in kube-controller-manager kube-apiserver etcd; do
    pid="$(awk -v n="$name" '$1==n{print $2}' "$dir/pids")"
    [ -n "$pid" ] || continue
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -f "$dir/pids"
  if [ "${TPU_OPERATOR_CONTROL_PLANE_KEEP:-0}" = 1 ]; then
    log "stopped; state kept in $dir"
  else
    rm -rf "$dir"
  fi
}

if [ "$mode" = stop ]; then
  dir="${1:-${TPU_OPERATOR_CONTROL_PLANE_DIR:-}}"
  [ -n "$dir" ] || { log "stop: give the state folder or set TPU_OPERATOR_CONTROL_PLANE_DIR"; exit 2; }
  stop_dir "$dir"
  exit 0
fi
case "$mode" in run | start | foreground) ;; *)
  log "unknown mode '$mode' (run | start | stop | no argument)"
  exit 2
  ;;
esac
if [ "$mode" = run ]; then
  [ "${1:-}" = -- ] && shift
  [ "$#" -gt 0 ] || { log "run: give a command after --"; exit 2; }
fi

t0=$(date +%s.%N)
bin="${TPU_OPERATOR_CONTROL_PLANE_BIN:-$("$here/build.sh")}"
t_built=$(date +%s.%N)
for b in etcd kube-apiserver kube-controller-manager; do
  [ -x "$bin/$b" ] || { log "$bin/$b missing (run tests/control-plane/build.sh)"; exit 2; }
done

dir="$(mktemp -d "${TMPDIR:-/tmp}/tpu-operator-control-plane.XXXXXX")"
pki="$dir/pki"
mkdir -p "$pki" "$dir/etcd" "$dir/logs"
chmod 700 "$dir/etcd"
: >"$dir/pids"
if [ "$mode" != start ]; then
  trap 'stop_dir "$dir"' EXIT
  trap 'exit 130' INT TERM
fi

# --- throwaway PKI ------------------------------------------------------------------------------
ossl() { openssl "$@" 2>/dev/null; }
ossl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 2 \
  -subj "/CN=tpu-operator-test-ca"
issue() { # name subject [extensions]
  local name="$1" subj="$2" ext="${3:-extendedKeyUsage=clientAuth}"
  ossl req -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -out "$pki/$name.csr" -subj "$subj"
  ossl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -out "$pki/$name.crt" -days 2 -extfile <(printf '%s\n' "$ext")
}
issue apiserver "/CN=kube-apiserver" \
  "$(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1\nextendedKeyUsage=serverAuth')"
issue admin "/O=system:masters/CN=tpu-operator-admin"
issue controller-manager "/CN=system:kube-controller-manager"
# The aggregator's client identity towards aggregated API servers (APIService objects, e.g. Kueue's
# visibility API in tests/kueue): they trust the X-Remote-* headers only from this certificate.
issue front-proxy-client "/CN=front-proxy-client"
ossl genrsa -out "$pki/sa.key" 2048
ossl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub"

etcd_port=$(free_port)
peer_port=$(free_port)
api_port=$(free_port)
kcm_port=$(free_port)
server="https://127.0.0.1:$api_port"

kubeconfig() { # file user
  local user="$2"
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tpu-operator-test
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$pki/$user.crt")
    client-key-data: $(base64 -w0 "$pki/$user.key")
contexts:
- name: tpu-operator-test
  context: {cluster: tpu-operator-test, user: $user, namespace: default}
current-context: tpu-operator-test
EOF
}
kubeconfig "$dir/kubeconfig" admin
kubeconfig "$dir/controller-manager.kubeconfig" controller-manager

spawn() { # name args...
  local name="$1"
  shift
  # setsid: a background `start` must outlive this script and must not get the caller's Ctrl-C.
  setsid "$bin/$name" "$@" >"$dir/logs/$name.log" 2>&1 </dev/null &
  echo "$name $!" >>"$dir/pids"
}
fail() {
  log "$1; last log lines:"
  tail -n 30 "$dir/logs/$2.log" >&2 || true
  [ "$mode" = start ] && stop_dir "$dir"
  exit 1
}
wait_for() { # name seconds command...
  local name="$1" secs="$2" deadline
  shift 2
  deadline=$(($(date +%s) + secs))
  until "$@" >/dev/null 2>&1; do
    pid="$(awk -v n="$name" '$1==n{print $2}' "$dir/pids")"
    kill -0 "$pid" 2>/dev/null || fail "$name exited during start-up" "$name"
    [ "$(date +%s)" -lt "$deadline" ] || fail "$name not ready after ${secs}s" "$name"
    sleep 0.2
  done
}

# --- etcd: single member, loopback only, no fsync (test data is thrown away; envtest does the same)
spawn etcd --name=tpu-operator-test --data-dir="$dir/etcd" \
  --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
  --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
  --initial-cluster="tpu-operator-test=http://127.0.0.1:$peer_port" --listen-metrics-urls="" \
  --unsafe-no-fsync --log-level=warn
wait_for etcd 60 curl -sf "http://127.0.0.1:$etcd_port/health"
t_etcd=$(date +%s.%N)

# --- kube-apiserver (the requestheader flags give delegated authentication (controller-manager,
# aggregated API servers) the front-proxy CA and name; the proxy-client certificate is what the
# aggregator presents when it forwards a request to an APIService's backend)
spawn kube-apiserver \
  --etcd-servers="http://127.0.0.1:$etcd_port" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
  --cert-dir="$pki" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
  --client-ca-file="$pki/ca.crt" --authorization-mode=RBAC \
  --requestheader-client-ca-file="$pki/ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$pki/front-proxy-client.crt" --proxy-client-key-file="$pki/front-proxy-client.key" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
  --service-cluster-ip-range=10.0.0.0/24 --allow-privileged=false --profiling=false \
  --endpoint-reconciler-type=none
curl_api() { curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "$@"; }
wait_for kube-apiserver 180 curl_api "$server/readyz"
t_api=$(date +%s.%N)

# --- kube-controller-manager: only the controllers an API-only cluster (no nodes, no pods) needs.
# As on kubeadm clusters each controller runs with its own ServiceAccount credentials, so RBAC's
# bootstrap roles (system:controller:generic-garbage-collector, ...) apply; the controller-manager's
# own identity may only mint those tokens.
# garbage-collector: ownerReferences cascading deletion; namespace: namespace termination;
# serviceaccount(-token) and root-ca-certificate-publisher: the `default` ServiceAccount and the
# kube-root-ca.crt ConfigMap every real namespace gets, so lists look like a real cluster's;
# clusterrole-aggregation: the default `edit` / `view` roles gain the chart's aggregated rules, so
# the RBAC suite can act as a tenant bound to `edit` (issue 32), as on every real cluster.
spawn kube-controller-manager \
  --kubeconfig="$dir/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$dir/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$dir/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$kcm_port" --cert-dir="$pki" \
  --leader-elect=false --root-ca-file="$pki/ca.crt" --service-account-private-key-file="$pki/sa.key" \
  --use-service-account-credentials=true \
  --controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller
wait_for kube-controller-manager 120 curl -skf "https://127.0.0.1:$kcm_port/healthz"
# The namespace controller's first act proves it is running: `default` gets its ServiceAccount.
wait_for kube-controller-manager 120 curl_api "$server/api/v1/namespaces/default/serviceaccounts/default"
t_kcm=$(date +%s.%N)

timing="$(awk -v a="$t0" -v b="$t_built" -v e="$t_etcd" -v s="$t_api" -v k="$t_kcm" 'BEGIN {
  printf "build/cache lookup %.1fs, certificates + etcd healthy %.1fs, apiserver /readyz %.1fs, controller-manager %.1fs, total start-up %.1fs",
    b-a, e-b, s-e, k-s, k-b }')"
echo "$timing" >"$dir/startup-time"
log "up at $server ($timing)"

exports="export KUBECONFIG=$dir/kubeconfig TPU_OPERATOR_KUBE=real TPU_OPERATOR_CONTROL_PLANE_DIR=$dir"
case "$mode" in
  start)
    echo "$exports"
    ;;
  run)
    set +e
    KUBECONFIG="$dir/kubeconfig" TPU_OPERATOR_KUBE=real TPU_OPERATOR_CONTROL_PLANE_DIR="$dir" "$@"
    status=$?
    set -e
    if [ "$status" != 0 ]; then
      # The state folder goes away on exit: show the servers' last words for CI logs.
      for name in kube-apiserver kube-controller-manager etcd; do
        log "last lines of $name's log:"
        grep -v '^I' "$dir/logs/$name.log" | tail -n 15 >&2 || true
      done
      log "command failed ($status); set TPU_OPERATOR_CONTROL_PLANE_KEEP=1 to keep $dir"
    fi
    exit "$status"
    ;;
  foreground)
    log "$exports"
    log "Ctrl-C to stop"
    while :; do sleep 3600 & wait $!; done
    ;;
esac
