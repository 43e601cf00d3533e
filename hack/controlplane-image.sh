#!/usr/bin/env bash
# `make controlplane-image`: the hosted backend's control-plane image, FROM scratch, nothing
# pulled: kube-apiserver, kube-controller-manager, etcd, etcdctl and etcdutl (the binaries `make
# envtest` builds from the Go module proxy), etcd-snapshot (cmd/etcd-snapshot) and audit-log
# (cmd/audit-log) and front-door (cmd/front-door) in /usr/local/bin, CA certificates (for OIDC issuers), a passwd entry for
# the non-root user 65532 the hosted pods run as. One image per Kubernetes version; a ProviderConfig
# names it in spec.hosted.images.
#
#   ENVTEST_ASSETS=bin/k8s/<k8s>-etcd<etcd> hack/controlplane-image.sh IMAGE
set -euo pipefail
cd "$(dirname "$0")/.."
image=${1:?image name, e.g. cluster-provider/controlplane:v1.37.1}
assets=${ENVTEST_ASSETS:?ENVTEST_ASSETS: the folder with kube-apiserver, kube-controller-manager, etcd, etcdctl and etcdutl}
start=$SECONDS
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root=$ctx/rootfs
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/tmp"
chmod 1777 "$root/tmp"
for f in kube-apiserver kube-controller-manager etcd etcdctl etcdutl; do
  [ -x "$assets/$f" ] || { echo "$assets/$f is missing: run make envtest" >&2; exit 1; }
  cp "$assets/$f" "$root/usr/local/bin/"
done
# The hosted backend's snapshot tool (cmd/etcd-snapshot): its snapshot Jobs and restores run it.
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$root/usr/local/bin/etcd-snapshot" ./cmd/etcd-snapshot
# The hosted API server's audit sidecar (cmd/audit-log): streams its audit log file to the container's stdout.
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$root/usr/local/bin/audit-log" ./cmd/audit-log
# The hosted front door (cmd/front-door): the endpoint of a control plane that hibernates.
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$root/usr/local/bin/front-door" ./cmd/front-door
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY rootfs/ /
USER 65532:65532
DOCKERFILE
old=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
DOCKER_BUILDKIT=0 docker build -q -t "$image" "$ctx" >/dev/null
if [ -n "$old" ] && [ "$old" != "$(docker image inspect -f '{{.Id}}' "$image")" ]; then
  docker rmi "$old" >/dev/null 2>&1 || true # the previous build, now untagged
fi
echo "built $image ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')) in $((SECONDS - start)) s" >&2
