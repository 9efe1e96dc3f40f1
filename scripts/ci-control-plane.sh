#!/usr/bin/env bash
# CI stage for the real Kubernetes control plane (issue 12): builds etcd, kube-apiserver and
# kube-controller-manager from Go modules (cached under ~/.cache/tpu-operator/control-plane, keyed by
# go.sum), starts them on loopback, runs the suites with TPU_OPERATOR_KUBE=real, and tears down.
#
#   TPU_OPERATOR_REAL_SUITES  `cargo test` argument lists, separated by `;`, of the suites to run
#                             against the real server after the differential suite (default: the
#                             chart's RBAC suite first, while the cluster holds no other test's
#                             objects, then the controllers' end-to-end suites and the kubectl
#                             checks; "none" skips)
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || {
  echo "ci-control-plane: Go is not installed; the real control plane is built from Go modules (Go >= 1.26)" >&2
  exit 2
}

start=$(date +%s)
echo "== control plane: build (cached)"
bin="$(tests/control-plane/build.sh)"
built=$(date +%s)
echo "   binaries in $bin ($((built - start))s)"

echo "== control plane: differential suite against kube-apiserver"
# `run` sets KUBECONFIG and TPU_OPERATOR_KUBE=real for the command and stops everything afterwards,
# also when the command fails.
TPU_OPERATOR_CONTROL_PLANE_BIN="$bin" tests/control-plane/up.sh run -- \
  cargo test --locked -p kube-conformance --test differential -- --nocapture --test-threads=1

suites="${TPU_OPERATOR_REAL_SUITES:--p tpu-operator --test rbac -- --nocapture; -p tpu-operator-controller --tests -- --test-threads=2; -p kube-emulator --test kubectl}"
if [ "$suites" != none ]; then
  # One fresh control plane for all of them (each test uses namespaces of its own).
  script="set -e"
  IFS=';' read -ra lists <<<"$suites"
  for args in "${lists[@]}"; do
    script+="; echo '== control plane: cargo test ${args}'; cargo test --locked ${args}"
  done
  TPU_OPERATOR_CONTROL_PLANE_BIN="$bin" tests/control-plane/up.sh run -- bash -c "$script"
fi
echo "== control plane: done in $(($(date +%s) - start))s (build/cache $((built - start))s)"
