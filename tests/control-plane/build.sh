#!/usr/bin/env bash
# Builds the upstream control plane (etcd, kube-apiserver, kube-controller-manager) from the Go
# modules pinned in this directory's go.mod/go.sum into a cache folder outside the checkout, and
# prints that bin folder. A second run with the same inputs is a no-op (the folder already exists).
#
#   TPU_OPERATOR_CONTROL_PLANE_CACHE  cache root (default ~/.cache/tpu-operator/control-plane)
#   GO                                go command (default: go)
#
# Builds run under `nice -n 19` so a shared machine's interactive work (and other builds) keep the
# CPU; on an idle CI machine nice costs nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
go_cmd="${GO:-go}"
cache_root="${TPU_OPERATOR_CONTROL_PLANE_CACHE:-$HOME/.cache/tpu-operator/control-plane}"

command -v "$go_cmd" >/dev/null || {
  echo "build.sh: '$go_cmd' not found; the real control plane is built from Go modules (Go >= 1.26)" >&2
  exit 2
}

# The key covers everything that decides the binaries: module pins, our etcd main, the flags below
# (this script) and the Go toolchain version.
key="$( { cat "$here/go.mod" "$here/go.sum" "$here/cmd/etcd/main.go" "$here/build.sh"; "$go_cmd" version; } \
  | sha256sum | cut -c1-16)"
out="$cache_root/$key"
if [ -x "$out/bin/kube-apiserver" ] && [ -x "$out/bin/kube-controller-manager" ] && [ -x "$out/bin/etcd" ]; then
  echo "$out/bin"
  exit 0
fi

tmp="$cache_root/.build-$key-$$"
rm -rf "$tmp"
mkdir -p "$tmp/bin"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
# Built from the module zip there is no git tree, so stamp the version the way Kubernetes' own
# hack/lib/version.sh does; otherwise /version reports v0.0.0-master and clients warn about skew.
k8s_version="$(cd "$here" && "$go_cmd" list -m -f '{{.Version}}' k8s.io/kubernetes)"
minor="${k8s_version#v1.}"
minor="${minor%%.*}"
version_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  version_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  version_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
# Lean binaries: no DWARF/symbol tables, no local paths, no VCS stamp (the checkout may be a git
# tree the build user does not own, which makes VCS stamping fail). CGO off: etcd's bbolt and the
# apiserver are pure Go, and static binaries do not depend on the build machine's libc.
(
  cd "$here"
  CGO_ENABLED=0 nice -n 19 "$go_cmd" build -mod=readonly -buildvcs=false -trimpath -ldflags="-s -w $version_ldflags" -o "$tmp/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    ./cmd/etcd
) >&2
echo "build.sh: built control plane in $(( $(date +%s) - start ))s into $out/bin" >&2
mkdir -p "$cache_root"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "$out/bin"
