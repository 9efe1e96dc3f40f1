#!/usr/bin/env bash
# CI stage for the real Kubernetes control plane (issue 12): builds etcd, kube-apiserver and
# kube-controller-manager from Go modules (cached under ~/.cache/tpu-operator/control-plane, keyed by
# go.sum), starts them on loopback, runs the suites with TPU_OPERATOR_KUBE=real, and tears down.
#
#   TPU_OPERATOR_KUEUE_SUITE  1 (default): also run the Kueue suite with the real Kueue (tests/kueue);
#                             0 skips it
#   TPU_OPERATOR_REAL_SUITES  `cargo test` argument lists, separated by `;`, of the suites to run
#                             against the real server after the differential suite (default: every
#                             install path first (it removes and reinstalls the project's CRDs, so
#                             it must run while no other suite has objects), then both API versions
#                             and migrate-storage (it moves the CRDs' storage version and back), then
#                             the upgrade from the previous release and the rollback (it installs
#                             that release's chart and CRDs, and leaves this release's CRDs), then
#                             the chart's RBAC
#                             suite, while the cluster holds no other test's objects, then the
#                             controllers' end-to-end suites and the kubectl checks; "none" skips)
#
# Every suite is selected as `--workspace --test NAME`, never `-p PACKAGE`: cargo resolves features
# for the packages selected, so `-p` rebuilt most dependencies and the test binaries again with
# other feature sets (the CI run of 2026-11-24 ran out of disk in this stage). `--workspace` keeps
# most of what `cargo test --workspace` built; a selection still activates only the dev-dependency
# features its own tests need, so the differential suite rebuilds about 30 crates (ring, rustls,
# the Google clients, kube) and the controller suites the controller's.
set -euo pipefail
cd "$(dirname "$0")/.."

# `--test NAME` for every integration test of the package $1. Test target names are unique in the
# workspace (checked here), so `--workspace --test NAME` runs that package's test and nothing else.
tests_of() {
  cargo metadata --no-deps --format-version 1 --locked | python3 -c '
import collections, json, sys
package = sys.argv[1]
meta = json.load(sys.stdin)
owners = collections.defaultdict(list)
for p in meta["packages"]:
    for t in p["targets"]:
        if "test" in t["kind"]:
            owners[t["name"]].append(p["name"])
clashes = {n: o for n, o in owners.items() if len(o) > 1}
if clashes:
    sys.exit(f"ci-control-plane: test target names must be unique in the workspace: {clashes}")
names = sorted(n for n, o in owners.items() if o == [package])
if not names:
    sys.exit(f"ci-control-plane: package {package} has no integration tests")
print(" ".join(f"--test {n}" for n in names))
' "$1"
}

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
  cargo test --locked --workspace --test differential -- --nocapture --test-threads=1

controller_tests="$(tests_of tpu-operator-controller)"
suites="${TPU_OPERATOR_REAL_SUITES:---workspace --test install_paths -- --nocapture; --workspace --test api_versions -- --nocapture; --workspace --test upgrade -- --nocapture; --workspace --test rbac -- --nocapture; --workspace ${controller_tests} -- --test-threads=2; --workspace --test kubectl}"
if [ "$suites" != none ]; then
  # One fresh control plane for all of them (each test uses namespaces of its own).
  script="set -e"
  IFS=';' read -ra lists <<<"$suites"
  for args in "${lists[@]}"; do
    script+="; echo \"== [\$(date +%T)] control plane: cargo test ${args}\"; cargo test --locked ${args}"
  done
  # Kueue's suite last, with the real Kueue manager (built from its Go module, cached like the
  # control plane) and its visibility API on: the operator's Workloads are admitted, queued and
  # preempted by Kueue itself (tests/kueue/README.md).
  if [ "${TPU_OPERATOR_KUEUE_SUITE:-1}" = 1 ]; then
    # The e2e suites (in-process controllers) and the chart's Kueue RBAC (the operator as the
    # chart's ServiceAccount), both against the one Kueue.
    script+="; echo \"== [\$(date +%T)] control plane + Kueue: cargo test --test e2e kueue; cargo test --test rbac kueue\""
    script+="; TPU_OPERATOR_KUEUE_VISIBILITY=1 tests/kueue/up.sh run -- bash -c 'cargo test --locked --workspace --test e2e kueue -- --nocapture && cargo test --locked --workspace --test rbac kueue -- --nocapture'"
  fi
  TPU_OPERATOR_CONTROL_PLANE_BIN="$bin" tests/control-plane/up.sh run -- bash -c "$script"
fi
echo "== control plane: done in $(($(date +%s) - start))s (build/cache $((built - start))s)"
