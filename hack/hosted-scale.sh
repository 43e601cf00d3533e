#!/usr/bin/env bash
# The operator's memory at N hosted clusters (docs/benchmarks.md "Hosted control planes"):
#
#   hack/hosted-scale.sh KUBECONFIG N [BATCH]
#
# On a platform where deploy/hosted runs and the nodes have $CONTROLPLANE_IMAGE, this creates
# ProviderConfig hosted-scale (etcd on emptyDir: no provisioner needed; CPU requests of 10m per
# container so that N control planes fit the nodes' schedulable CPU, which requests count, not
# use) and N Clusters in namespace hosted-scale, BATCH at a time, each batch awaited Ready. After
# each batch it prints the Clusters Ready, how long the batch took, the operator pods' working
# sets and the control planes' (from the kubelets' summaries). It deletes what it made at the
# end (KEEP=1 keeps it).
set -euo pipefail
kubeconfig=${1:?kubeconfig of the platform}
n=${2:?number of clusters}
batch=${3:-10}
image=${CONTROLPLANE_IMAGE:-cluster-provider/controlplane:v1.37.1}
opns=${OPERATOR_NAMESPACE:-cluster-provider-system}
ns=hosted-scale
kc() { kubectl --kubeconfig "$kubeconfig" "$@"; }
say() { printf '==> %s %s\n' "$(date -u +%T)" "$*" >&2; }

cleanup() {
  [ "${KEEP:-}" = 1 ] && return
  say "deleting the Clusters and ProviderConfig hosted-scale"
  kc -n "$ns" delete clusters --all --wait=true --timeout=10m || true
  kc delete providerconfig hosted-scale --wait=true --timeout=5m || true
  kc delete namespace "$ns" --wait=false || true
}
trap cleanup EXIT

version=${image##*:v}
kc apply -f - <<YAML
apiVersion: providers.clusters.openmcp.cloud/v1alpha1
kind: ProviderConfig
metadata:
  name: hosted-scale
spec:
  backend: hosted
  supportedVersions: [{version: "$version"}]
  defaultVersion: "$version"
  hosted:
    images: {"$version": "$image"}
    resources:
      apiServer: {requests: {cpu: 10m, memory: 256Mi}, limits: {memory: 768Mi}}
      controllerManager: {requests: {cpu: 10m, memory: 64Mi}, limits: {memory: 256Mi}}
      etcd: {requests: {cpu: 10m, memory: 64Mi}, limits: {memory: 512Mi}}
YAML
kc create namespace "$ns" --dry-run=client -o yaml | kc apply -f -
profile=$(kc get clusterprofiles -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | grep '\.hosted-scale$' || true)
for i in $(seq 60); do
  [ -n "$profile" ] && break
  sleep 1
  profile=$(kc get clusterprofiles -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | grep '\.hosted-scale$' || true)
done
[ -n "$profile" ] || { say "no ClusterProfile for ProviderConfig hosted-scale after 60 s"; exit 1; }

# memory: the operator's pods (name and MiB) and the control planes' total and median (MiB).
memory() {
  local nodes
  nodes=$(kc get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
  for node in $nodes; do kc get --raw "/api/v1/nodes/$node/proxy/stats/summary"; done |
    jq -s -r --arg op "$opns" '
      [.[].pods[]] as $pods
      | ($pods | map(select(.podRef.namespace == $op)) | map("\(.podRef.name) \(.memory.workingSetBytes / 1048576 | floor) MiB") | join(", ")) as $ops
      | ($pods | map(select(.podRef.namespace | startswith("hcp-"))) | group_by(.podRef.namespace)
         | map(map(.memory.workingSetBytes) | add / 1048576) | sort) as $cps
      | "operator pods: \($ops); control planes: \($cps | length), median \($cps[($cps | length) / 2 | floor] // 0 | floor) MiB, total \($cps | add // 0 | floor) MiB"'
}

say "before: $(memory)"
made=0
while [ "$made" -lt "$n" ]; do
  start=$SECONDS
  upto=$((made + batch < n ? made + batch : n))
  for i in $(seq "$made" $((upto - 1))); do
    kc apply -f - >/dev/null <<YAML
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: Cluster
metadata: {name: "s$(printf %03d "$i")", namespace: $ns}
spec: {profile: "$profile", tenancy: Exclusive}
YAML
  done
  made=$upto
  if ! kc -n "$ns" wait --for=jsonpath='{.status.phase}'=Ready clusters --all --timeout=15m >/dev/null; then
    say "not all $made Clusters Ready within 15 minutes: $(kc -n "$ns" get clusters -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | sort | uniq -c | xargs)"
    say "$(memory)"
    exit 1
  fi
  say "$made Clusters Ready (this batch in $((SECONDS - start)) s); $(memory); load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
