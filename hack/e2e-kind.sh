#!/usr/bin/env bash
# `make e2e-kind`: the scenario suite against the operator deployed into a kind cluster.
#
# Creates kind cluster $KIND_CLUSTER (default cluster-provider-e2e), builds the image $IMAGE
# (default cluster-provider:dev) and loads it into the cluster, applies deploy/overlays/ephemeral, waits for
# the operator to roll out, and runs TestScenarioOnKind (test/e2e) against it. The kind cluster is
# deleted at the end unless KEEP=1. Needs a Docker engine (the Makefile checks first) and kubectl.
set -euo pipefail
cd "$(dirname "$0")/.."

KIND_VERSION=${KIND_VERSION:-v0.33.0}
KIND_CLUSTER=${KIND_CLUSTER:-cluster-provider-e2e}
IMAGE=${IMAGE:-cluster-provider:dev}
bin=$PWD/bin
kubeconfig=$bin/e2e-kind.kubeconfig
kind=$bin/kind-$KIND_VERSION

say() { printf '==> %s\n' "$*" >&2; }

command -v kubectl >/dev/null || { echo "make e2e-kind needs kubectl on the PATH" >&2; exit 1; }
if [ ! -x "$kind" ]; then
  say "Installing kind $KIND_VERSION into bin/"
  mkdir -p "$bin/.tmp"
  GOBIN="$bin/.tmp" go install "sigs.k8s.io/kind@$KIND_VERSION"
  mv "$bin/.tmp/kind" "$kind"
fi

cleanup() {
  if [ "${KEEP:-}" = 1 ]; then
    say "KEEP=1: kind cluster $KIND_CLUSTER stays (kubeconfig $kubeconfig)"
  else
    say "Deleting kind cluster $KIND_CLUSTER"
    "$kind" delete cluster --name "$KIND_CLUSTER" --kubeconfig "$kubeconfig" || true
  fi
}
trap cleanup EXIT

if ! "$kind" get clusters | grep -qx "$KIND_CLUSTER"; then
  say "Creating kind cluster $KIND_CLUSTER"
  "$kind" create cluster --name "$KIND_CLUSTER" --kubeconfig "$kubeconfig" --wait 5m
else
  "$kind" get kubeconfig --name "$KIND_CLUSTER" >"$kubeconfig"
fi

say "Building $IMAGE and loading it into $KIND_CLUSTER"
make image IMAGE="$IMAGE"
"$kind" load docker-image "$IMAGE" --name "$KIND_CLUSTER"

# deploy/overlays/ephemeral, not deploy/default: a throw-away platform needs no claim, and a kind
# node made offline has no image for a volume provisioner, so deploy/default's claim would stay
# Pending.
say "Applying deploy/overlays/ephemeral"
kubectl --kubeconfig "$kubeconfig" apply --server-side -k deploy/overlays/ephemeral
kubectl --kubeconfig "$kubeconfig" -n cluster-provider-system set image deploy/cluster-provider operator="$IMAGE"
kubectl --kubeconfig "$kubeconfig" -n cluster-provider-system rollout status deploy/cluster-provider --timeout=5m

say "Running the scenario suite against it"
provider=$(sed -n 's/^PROVIDER_NAME=//p' deploy/default/config.env)
environment=$(sed -n 's/^ENVIRONMENT=//p' deploy/default/config.env)
E2E_KIND_KUBECONFIG="$kubeconfig" E2E_PROVIDER_NAME="$provider" E2E_ENVIRONMENT="$environment" \
  go test ./test/e2e/ -run '^TestScenarioOnKind$' -count=1 -v
