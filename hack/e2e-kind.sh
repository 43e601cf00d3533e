#!/usr/bin/env bash
# `make e2e-kind`: the operator deployed into a kind cluster and the scenario suite against it;
# then the kind backend for real. The Makefile has built the node image ($KIND_NODE_IMAGE, make
# kind-image) and the operator image ($IMAGE, make image) first; nothing is pulled.
#
#   1. kind cluster $KIND_CLUSTER (default cluster-provider-e2e), the PLATFORM, from the node image,
#      with $KIND_WORKERS worker nodes (default 3: the operator runs on a worker and reaches the
#      API server across nodes; the hosted control planes spread over them, and a highly available
#      one puts its three etcd members on three nodes) (hack/kindcluster: the kind backend's code,
#      so the same networking and docker shim);
#   2. $IMAGE loaded into it, deploy/default applied with that image; the state claim is bound to
#      a PersistentVolume on the node made here (an offline node has no volume provisioner);
#   3. TestScenarioOnKind against the deployed operator (ProviderConfig → profile, Cluster →
#      Ready, token AccessRequest → working kubeconfig, deletion);
#   4. the operator deployed a second way, exactly as openMCP's operator deploys a ClusterProvider
#      (deploy/openmcp/clusterprovider.yaml shaped by hack/openmcpshape as openMCP's code shapes it:
#      ServiceAccounts bound to cluster-admin, init Job cp-local-init with args only, then the
#      Deployment cp-local with no securityContext, no probes, RollingUpdate), and
#      TestScenarioOnKind again through it, then a rollout of it; our labeller is switched on in
#      its runCommand, since openMCP's operator, which would run its own, does not run here;
#   5. the hosted backend, the control-plane image $CONTROLPLANE_IMAGE loaded and pinned,
#      hack/localprovisioner serving claims of StorageClass hosted-local with local volumes on the
#      nodes: first as openMCP deploys it (deploy/openmcp/clusterprovider-hosted.yaml through
#      hack/openmcpshape: two stateless replicas, --hosted-backend) with TestScenarioHostedOnKind
#      (the scenario suite against a hosted profile, clients reaching the NodePorts from this
#      machine, under the host-access policy, TestHostedScopeOnKind for cp-local); then deploy/hosted with TestHostedScopeOnKind (the operator's ServiceAccount may not
#      annotate a pod of kube-system nor make a Deployment in default) and TestHostedOnKind (ten Clusters spread over the workers, the
#      operator's pods deleted and rolled to another image under polling clients, control-plane
#      pods deleted, figures) and TestHostedUpgradeOnKind (a Cluster made from
#      $CONTROLPLANE_PREV_IMAGE upgraded in place to the current minor under a polling client, then
#      a downgrade refused) and TestHostedRenewalOnKind (the operator with 10-minute certificates:
#      a renewal rolls an API server under a polling client without a failed request) and
#      TestHostedCARotationOnKind (the operator with CAs valid 8 minutes: the cluster CA and etcd's
#      rotated through an overlapping trust bundle, the API server and etcd rolled at each phase,
#      under a client re-reading its kubeconfig without a failed request) and
#      TestHostedHAOnKind (a highly available control plane: an etcd pod and an API server pod
#      deleted together, then a worker drained, under a polling client without a failed request)
#      and TestHostedHARestoreCordonedOnKind (a highly available restore with one member's node
#      cordoned: Restoring, the API servers at zero, nothing served until the node is uncordoned,
#      then the snapshot's data, 410 Gone for a watch from before, later writes kept)
#      and TestHostedQuorumLossOnKind (two of three etcd members' nodes cordoned and their pods
#      deleted: EtcdHealthy False, EtcdQuorumLost, within a minute, naming both; uncordoned: True)
#      and TestHostedBackupOnKind (snapshots by Jobs onto a claim of namespace
#      cluster-provider-backups, scheduled and on demand, kept beyond the Cluster) and
#      TestHostedRestoreDrill (etcd's claim and pod deleted, the snapshot restored in place, a watch
#      from before it ending in 410 Gone, and a new Cluster made from it) and
#      TestHostedHibernationOnKind (a control plane behind its front door hibernated when idle and
#      on demand, etcd and the API server at zero, woken by the first request of a kubeconfig
#      from before, the wake figures); then, LAST on the
#      platform because a worker stays lost, TestHostedNodeLossOnKind (snapshots in an object store,
#      SeaweedFS's weed of $S3_SERVER_BINARY on kind's Docker network gateway; the worker holding
#      etcd and the snapshots' claim removed with docker rm -f and deleted, the steps of
#      docs/backups.md "Restore a hosted Cluster whose node is gone" run with kubectl: the Cluster
#      restored from the store on the same endpoint, CA and kubeconfigs);
#   6. TestScenarioKindBackend and TestRealKind: the operator binary with --kind-backend on this
#      machine, a Cluster of backend kind becomes a kind cluster made from the same node image.
# The platform cluster is deleted at the end unless KEEP=1. Needs a Docker engine and kubectl.
set -euo pipefail
cd "$(dirname "$0")/.."

KIND_CLUSTER=${KIND_CLUSTER:-cluster-provider-e2e}
KIND_WORKERS=${KIND_WORKERS:-3}
IMAGE=${IMAGE:-cluster-provider:dev}
CONTROLPLANE_IMAGE=${CONTROLPLANE_IMAGE:?CONTROLPLANE_IMAGE: the control-plane image of make controlplane-image}
CONTROLPLANE_PREV_IMAGE=${CONTROLPLANE_PREV_IMAGE:?CONTROLPLANE_PREV_IMAGE: the control-plane image of make controlplane-image-prev}
S3_SERVER_BINARY=${S3_SERVER_BINARY:?S3_SERVER_BINARY: SeaweedFS weed of make s3server}
# The operator image of the hosted run's rollout: the same image under another name.
NEXT_IMAGE=${IMAGE%%:*}:e2e-next
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:?KIND_NODE_IMAGE: the node image of make kind-image}
bin=$PWD/bin
kubeconfig=$bin/e2e-kind.kubeconfig
ns=cluster-provider-system
say() { printf '==> %s\n' "$*" >&2; }
kc() { kubectl --kubeconfig "$kubeconfig" "$@"; }

command -v kubectl >/dev/null || { echo "make e2e-kind needs kubectl on the PATH" >&2; exit 1; }
# Every Go build here is made with -race, as make verify's go vet and make test's go test are:
# they share the compiled packages in Go's build cache, so that cold CI compiles the module's
# dependencies once for all three instead of once more without -race.
mkdir -p "$bin"
go build -race -o "$bin/kindcluster" ./hack/kindcluster

cleanup() {
  if [ -n "${provisioner:-}" ]; then
    kill "$provisioner" 2>/dev/null || true
  fi
  if [ -n "${kindtests:-}" ] && kill -0 "$kindtests" 2>/dev/null; then
    kill -- -"$kindtests" 2>/dev/null || kill "$kindtests" 2>/dev/null || true
    say "stopped the kind backend's tests; their output so far:"
    cat "$kindlog" >&2 || true
  fi
  if [ "${KEEP:-}" = 1 ]; then
    say "KEEP=1: kind cluster $KIND_CLUSTER stays (kubeconfig $kubeconfig)"
    return
  fi
  if [ "${failed:-1}" = 1 ]; then
    say "failed: the operator's log follows"
    kc -n "$ns" logs deploy/cluster-provider --tail=60 2>&1 || kc -n openmcp-system logs deploy/cp-local --tail=60 2>&1 || true
  fi
  say "Deleting kind cluster $KIND_CLUSTER"
  "$bin/kindcluster" delete --name "$KIND_CLUSTER" --kubeconfig "$kubeconfig" || true
}
trap cleanup EXIT

start=$SECONDS
say "Creating kind cluster $KIND_CLUSTER from $KIND_NODE_IMAGE"
"$bin/kindcluster" create --name "$KIND_CLUSTER" --image "$KIND_NODE_IMAGE" --kubeconfig "$kubeconfig" --workers "$KIND_WORKERS"
say "Loading $IMAGE, $NEXT_IMAGE, $CONTROLPLANE_IMAGE and $CONTROLPLANE_PREV_IMAGE into $KIND_CLUSTER"
docker tag "$IMAGE" "$NEXT_IMAGE"
"$bin/kindcluster" load --name "$KIND_CLUSTER" "$IMAGE" "$NEXT_IMAGE" "$CONTROLPLANE_IMAGE" "$CONTROLPLANE_PREV_IMAGE"

# deploy/default keeps the clusters' state on a claim. A node image made offline has no volume
# provisioner, so a local PersistentVolume on a node the operator may run on (the worker: kind
# taints its control plane when there are workers), owned by the operator's user, serves the
# claim here, as a cluster's storage would.
node=$KIND_CLUSTER-control-plane
[ "$KIND_WORKERS" -gt 0 ] && node=$KIND_CLUSTER-worker
# state_volume NAME DIR NAMESPACE CLAIM-FILE: a local PersistentVolume NAME in folder DIR of $node,
# owned by the operator's user, bound to the claim cluster-provider-state in NAMESPACE, of the
# size CLAIM-FILE asks for.
state_volume() {
  local size
  size=$(sed -n 's/^ *storage: *//p' "$4")
  docker exec "$node" sh -c "mkdir -p $2 && chown 65532:65532 $2"
  kc apply -f - <<EOF
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $1
spec:
  capacity: {storage: $size}
  accessModes: [ReadWriteOnce]
  storageClassName: standard
  persistentVolumeReclaimPolicy: Retain
  local: {path: $2}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$node]}]
  claimRef: {namespace: $3, name: cluster-provider-state}
EOF
}
state_volume cluster-provider-e2e-state /var/lib/cluster-provider-e2e "$ns" deploy/default/pvc.yaml

# policy_selects NAMESPACE POLICY DEPLOYMENT: the NetworkPolicy's own pod selector finds exactly
# the Deployment's pods (the ptp plugin here does not enforce policies; that they would apply to
# the right pod is what can be checked here).
policy_selects() {
  local selector want got
  selector=$(kc -n "$1" get networkpolicy "$2" -o go-template='{{range $k, $v := .spec.podSelector.matchLabels}}{{$k}}={{$v}},{{end}}')
  want=$(kc -n "$1" get pods -l "$(kc -n "$1" get deploy "$3" -o go-template='{{range $k, $v := .spec.selector.matchLabels}}{{$k}}={{$v}},{{end}}' | sed 's/,$//')" -o name | sort)
  got=$(kc -n "$1" get pods -l "${selector%,}" -o name | sort)
  if [ -z "$want" ] || [ "$want" != "$got" ]; then
    say "NetworkPolicy $1/$2 selects [$got], the pods of deploy/$3 are [$want]"
    return 1
  fi
  say "NetworkPolicy $1/$2 selects the pods of deploy/$3: $got"
}

say "Applying deploy/default with $IMAGE"
kc apply --server-side -k deploy/default
kc -n "$ns" set image deploy/cluster-provider operator="$IMAGE"
kc -n "$ns" rollout status deploy/cluster-provider --timeout=5m
say "The platform is up with the operator after $((SECONDS - start)) s"
policy_selects "$ns" cluster-provider cluster-provider

# The kind backend's tests need no platform: they make kind clusters of their own, and mostly wait
# for them, so they run beside everything below (their output is printed at the end).
say "The kind backend for real, beside the platform's tests: Clusters as kind clusters from $KIND_NODE_IMAGE"
kindlog=$bin/e2e-kind-backend.log
set -m # its own process group: stopped as a whole if this script fails
(
  KIND_NODE_IMAGE="$KIND_NODE_IMAGE" go test -race ./test/e2e/ -run '^TestScenarioKindBackend$' -count=1 -v -timeout 20m &&
    KIND_NODE_IMAGE="$KIND_NODE_IMAGE" go test -race ./backend/kind/ -run '^TestRealKind$' -count=1 -v -timeout 20m
) >"$kindlog" 2>&1 &
kindtests=$!
set +m

say "Scenario suite against the deployed operator"
provider=$(sed -n 's/^PROVIDER_NAME=//p' deploy/default/config.env)
environment=$(sed -n 's/^ENVIRONMENT=//p' deploy/default/config.env)
E2E_KIND_KUBECONFIG="$kubeconfig" E2E_PROVIDER_NAME="$provider" E2E_ENVIRONMENT="$environment" \
  go test -race ./test/e2e/ -run '^TestScenarioOnKind$' -count=1 -v

say "The operator as openMCP deploys it: deploy/openmcp through hack/openmcpshape"
kc -n "$ns" delete deploy/cluster-provider --wait=true
kc -n "$ns" wait --for=delete pod -l app.kubernetes.io/component=operator --timeout=2m
omns=openmcp-system
kc create namespace "$omns"
state_volume cluster-provider-e2e-openmcp-state /var/lib/cluster-provider-openmcp "$omns" deploy/openmcp/state.yaml
kc apply -f deploy/openmcp/state.yaml
# shape FILE PART: the objects openMCP's operator makes of the ClusterProvider in FILE.
shape() {
  go run -race ./hack/openmcpshape --namespace "$omns" --environment "$environment" --image "$IMAGE" \
    --run-command-extra=--controllers=accessrequest,providerconfig --part "$2" <"$1"
}
shape deploy/openmcp/clusterprovider.yaml init | kc apply -f -
if ! kc -n "$omns" wait --for=condition=complete job/cp-local-init --timeout=3m; then
  kc -n "$omns" logs job/cp-local-init || true
  exit 1
fi
kc -n "$omns" logs job/cp-local-init
shape deploy/openmcp/clusterprovider.yaml run | kc apply -f -
kc -n "$omns" rollout status deploy/cp-local --timeout=5m
kc apply -f deploy/openmcp/networkpolicy.yaml
policy_selects "$omns" cp-local cp-local
E2E_KIND_KUBECONFIG="$kubeconfig" E2E_PROVIDER_NAME=local E2E_ENVIRONMENT="$environment" \
  E2E_OPERATOR_NAMESPACE="$omns" E2E_OPERATOR_DEPLOYMENT=cp-local \
  go test -race ./test/e2e/ -run '^TestScenarioOnKind$' -count=1 -v
say "A rollout of cp-local (RollingUpdate: the new pod starts before the old one stops)"
selector=app.kubernetes.io/instance=local,app.kubernetes.io/component=controller
old=$(kc -n "$omns" get pods -l "$selector" -o jsonpath='{.items[*].metadata.name}')
kc -n "$omns" rollout restart deploy/cp-local
kc -n "$omns" rollout status deploy/cp-local --timeout=5m
kc -n "$omns" wait --for=delete "pod/$old" --timeout=2m
# The new pod takes the lease the old one released on SIGTERM (within the retry period, 26 s).
pod=$(kc -n "$omns" get pods -l "$selector" -o jsonpath='{.items[*].metadata.name}')
[ "$(wc -w <<<"$pod")" = 1 ] || { echo "want one cp-local pod after the rollout, have: $pod" >&2; exit 1; }
for i in $(seq 60); do
  holder=$(kc -n "$omns" get lease local.cluster-provider.openmcp.cloud -o jsonpath='{.spec.holderIdentity}')
  [ "$holder" = "$pod" ] && break
  [ "$i" = 60 ] && { echo "the lease is held by '$holder', not the new pod $pod, 60 s after the rollout" >&2; exit 1; }
  sleep 1
done
say "After the rollout, $pod leads ($((i)) s after the rollout finished)"
kc -n "$omns" delete deploy/cp-local --wait=true

say "The hosted backend as openMCP deploys it: deploy/openmcp/clusterprovider-hosted.yaml"
go build -race -o "$bin/localprovisioner" ./hack/localprovisioner
"$bin/localprovisioner" --kubeconfig "$kubeconfig" >"$bin/localprovisioner.log" 2>&1 &
provisioner=$!
# openMCP's operator makes the init Job anew for the changed ClusterProvider (a Job's pod template
# cannot change).
kc -n "$omns" delete job/cp-local-init --wait=true
shape deploy/openmcp/clusterprovider-hosted.yaml init | kc apply -f -
kc -n "$omns" wait --for=condition=complete job/cp-local-init --timeout=3m
shape deploy/openmcp/clusterprovider-hosted.yaml run | kc apply -f -
kc -n "$omns" rollout status deploy/cp-local --timeout=5m
policy_selects "$omns" cp-local cp-local
# openMCP binds cluster-admin to cp-local: deploy/policy/operator.yaml, which cp-local-init applied
# (cluster-provider init), holds it (docs/security.md).
E2E_KIND_KUBECONFIG="$kubeconfig" E2E_PROVIDER_NAME=local E2E_ENVIRONMENT="$environment" \
  E2E_CONTROLPLANE_IMAGE="$CONTROLPLANE_IMAGE" E2E_OPERATOR_SA="system:serviceaccount:$omns:cp-local" \
  go test -race ./test/e2e/ -run '^(TestHostedScopeOnKind|TestScenarioHostedOnKind)$' -count=1 -v -timeout 20m
kc -n "$omns" delete deploy/cp-local --wait=true

say "The hosted backend: deploy/hosted, each Cluster's control plane as pods of the platform"
# The encryption keys kept beside the snapshots in cluster-provider-backups are wrapped with the
# key of the operator that took them (Secret cluster-provider-key-wrapping of its namespace; the
# scenario's Clusters were snapshotted before their deletion). The operator moves from openMCP's
# namespace to deploy/'s here, so its key goes with it, as an administrator moving the operator
# carries it (docs/security.md); without it the new operator refuses those copies (StateDamaged).
if kc -n "$omns" get secret cluster-provider-key-wrapping >/dev/null 2>&1 && ! kc -n "$ns" get secret cluster-provider-key-wrapping >/dev/null 2>&1; then
  kc -n "$omns" get secret cluster-provider-key-wrapping -o yaml |
    sed -e "s/^  namespace: $omns\$/  namespace: $ns/" -e '/^  resourceVersion:/d' -e '/^  uid:/d' -e '/^  creationTimestamp:/d' |
    kc create -f -
fi
kc apply --server-side -k deploy/hosted
kc -n "$ns" set image deploy/cluster-provider operator="$IMAGE"
kc -n "$ns" rollout status deploy/cluster-provider --timeout=5m
E2E_KIND_KUBECONFIG="$kubeconfig" E2E_PROVIDER_NAME="$provider" E2E_ENVIRONMENT="$environment" \
  E2E_CONTROLPLANE_IMAGE="$CONTROLPLANE_IMAGE" E2E_OPERATOR_NEXT_IMAGE="$NEXT_IMAGE" \
  E2E_CONTROLPLANE_PREV_IMAGE="$CONTROLPLANE_PREV_IMAGE" \
  go test -race ./test/e2e/ -run '^(TestHostedScopeOnKind|TestHostedOnKind|TestHostedUpgradeOnKind|TestHostedRenewalOnKind|TestHostedCARotationOnKind|TestHostedHAOnKind|TestHostedHARestoreCordonedOnKind|TestHostedQuorumLossOnKind|TestHostedBackupOnKind|TestHostedRestoreDrill|TestHostedHibernationOnKind)$' -count=1 -v -timeout 75m -parallel 8
# Last on the platform: the drill loses a worker for good.
E2E_KIND_KUBECONFIG="$kubeconfig" E2E_PROVIDER_NAME="$provider" E2E_ENVIRONMENT="$environment" \
  E2E_CONTROLPLANE_IMAGE="$CONTROLPLANE_IMAGE" S3_SERVER_BINARY="$S3_SERVER_BINARY" \
  go test -race ./test/e2e/ -run '^TestHostedNodeLossOnKind$' -count=1 -v -timeout 20m
kc -n "$ns" delete deploy/cluster-provider --wait=true
kill "$provisioner" 2>/dev/null || true

say "The kind backend's tests (begun beside the platform's)"
kindrc=0
wait "$kindtests" || kindrc=$?
kindtests=""
cat "$kindlog" >&2
[ "$kindrc" = 0 ] || { echo "the kind backend's tests failed (exit $kindrc; output above)" >&2; exit 1; }
failed=0
say "make e2e-kind passed in $((SECONDS - start)) s"
