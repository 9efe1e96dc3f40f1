#!/usr/bin/env bash
# Builds the real Kueue manager (sigs.k8s.io/kueue/cmd/kueue) from the Go module pinned in this
# directory's go.mod/go.sum into a cache folder outside the checkout, copies the manifests the
# harness applies (CRDs, webhook configurations) out of the same module, and prints the bin folder.
# A second run with the same inputs is a no-op (the folder already exists).
#
#   TPU_OPERATOR_KUEUE_CACHE  cache root (default ~/.cache/tpu-operator/kueue)
#   GO                        go command (default: go)
#
# Layout of $cache_root/<key>/: bin/kueue; crd/ and webhook/, copies of the module's
# config/components/crd (bases/*.yaml, the conversion-webhook patches and the kustomization.yaml that
# lists them) and config/components/webhook (manifests.yaml); version (the module version). Nothing
# generated is checked in: the manifests always match the binary because both come from one module.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
go_cmd="${GO:-go}"
cache_root="${TPU_OPERATOR_KUEUE_CACHE:-$HOME/.cache/tpu-operator/kueue}"

command -v "$go_cmd" >/dev/null || {
  echo "build.sh: '$go_cmd' not found; Kueue is built from its Go module (Go >= 1.26)" >&2
  exit 2
}

# The key covers everything that decides the output: module pins, the flags below (this script)
# and the Go toolchain version.
key="$( { cat "$here/go.mod" "$here/go.sum" "$here/build.sh"; "$go_cmd" version; } | sha256sum | cut -c1-16)"
out="$cache_root/$key"
if [ -x "$out/bin/kueue" ] && [ -f "$out/webhook/manifests.yaml" ] && [ -f "$out/crd/kustomization.yaml" ]; then
  echo "$out/bin"
  exit 0
fi

tmp="$cache_root/.build-$key-$$"
rm -rf "$tmp"
mkdir -p "$tmp/bin"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
version="$(cd "$here" && "$go_cmd" list -m -f '{{.Version}}' sigs.k8s.io/kueue)"
moddir="$(cd "$here" && "$go_cmd" mod download -json sigs.k8s.io/kueue | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
# Stamp the version the way Kueue's Makefile does (its `version` package), so the manager's
# "Initializing" log line and its user agent name the real release instead of v0.0.0-main.
ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version -X sigs.k8s.io/kueue/pkg/version.BuildDate=1970-01-01T00:00:00Z"
# Lean static binary: no DWARF/symbol tables, no local paths, no VCS stamp (built from the module
# zip there is no git tree, and the checkout may be owned by another user). CGO off: pure Go.
(
  cd "$here"
  CGO_ENABLED=0 nice -n 19 "$go_cmd" build -mod=readonly -buildvcs=false -trimpath -ldflags="$ldflags" \
    -o "$tmp/bin/" sigs.k8s.io/kueue/cmd/kueue
) >&2
cp -r "$moddir/config/components/crd" "$moddir/config/components/webhook" "$tmp/"
chmod -R u+w "$tmp" # the module cache is read-only; the copies need not be
echo "$version" >"$tmp/version"
echo "build.sh: built kueue $version in $(( $(date +%s) - start ))s into $out/bin" >&2
mkdir -p "$cache_root"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "$out/bin"
