#!/usr/bin/env bash
# `make image`: the operator's image without pulling anything (see Dockerfile).
#
#   ENVTEST_ASSETS=bin/k8s/<k8s>-etcd<etcd> hack/image.sh IMAGE
set -euo pipefail
cd "$(dirname "$0")/.."
image=${1:?image name, e.g. cluster-provider:dev}
assets=${ENVTEST_ASSETS:?ENVTEST_ASSETS: the folder with kube-apiserver, kube-controller-manager, etcd, etcdctl and etcdutl}
start=$SECONDS
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root=$ctx/rootfs
mkdir -p "$root/usr/local/bin" "$root/opt/cluster-provider/k8s" "$root/etc/ssl/certs" "$root/tmp"
chmod 1777 "$root/tmp"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$root/usr/local/bin/cluster-provider" ./cmd/cluster-provider
for f in kube-apiserver kube-controller-manager etcd etcdctl etcdutl; do
  [ -x "$assets/$f" ] || { echo "$assets/$f is missing: run make envtest" >&2; exit 1; }
  cp "$assets/$f" "$root/opt/cluster-provider/k8s/"
done
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
mkdir -p "$ctx/state/var/lib/cluster-provider"
tar --owner=65532 --group=65532 --numeric-owner --mode=0700 -cf "$ctx/state.tar" -C "$ctx/state" var/lib/cluster-provider
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
old=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
DOCKER_BUILDKIT=0 docker build -q -f Dockerfile -t "$image" "$ctx" >/dev/null
if [ -n "$old" ] && [ "$old" != "$(docker image inspect -f '{{.Id}}' "$image")" ]; then
  docker rmi "$old" >/dev/null 2>&1 || true # the previous build, now untagged
fi
echo "built $image ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')) in $((SECONDS - start)) s" >&2
