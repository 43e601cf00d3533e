#!/usr/bin/env bash
# `make kind-image`: a kind node image built offline, from the Go module proxy and Debian's packages.
#
#   ENVTEST_ASSETS=bin/k8s/<k8s>-etcd<etcd> K8S_VERSION=1.37.1 hack/kind-image.sh
#
# No registry is reachable and release hosts are not, so neither `kind build node-image` (it pulls
# etcd, coredns, pause, kindnetd, local-path) nor kind's own base image can be used. This script
# makes the same image by hand:
#   1. a Debian rootfs by debootstrap, with kind's package list (less the storage extras);
#   2. every component built from its module at the version kind v0.33's base image pins:
#      kubelet, kubeadm, kubectl, kube-scheduler, kube-proxy (one go build, the same flags and
#      CGO_ENABLED=0 as `make envtest`, so the build cache is shared); kube-apiserver,
#      kube-controller-manager and etcd are `make envtest`'s own binaries; containerd v2,
#      runc (cgo, seccomp, static), crictl, the CNI plugins ptp/host-local/loopback/portmap,
#      coredns, and pause (gcc -static, from the kubernetes module);
#   3. a component image per control-plane image kubeadm asks for (`kubeadm config images list`),
#      each a `docker import` of a rootfs holding its static binary;
#   4. the node image: rootfs + kind's base files (from the sigs.k8s.io/kind module) + binaries
#      (docker build FROM the imported rootfs), then started once to import the component images
#      into its containerd (pinned, unpacked on first use, as kind does) and `docker commit`ed.
#
# The node image carries what this project's machines need (cgroup v1, an engine that refuses
# --privileged): kubelet --fail-cgroupv1=false, and an entrypoint in front of kind's that makes
# the cgroup mounts writable and restricts containerd's oom_score_adj when CAP_SYS_RESOURCE is
# missing (see cluster-provider-entrypoint below). Clusters are made with no default CNI
# (kindnetd is not on the module proxy): backend/kind writes a ptp/host-local configuration.
#
# Everything is cached OUTSIDE the clone, in $KIND_CACHE (default ~/.cache/cluster-provider/kind):
# rootfs/ (the debootstrap, ~270 MB), v<k8s>/bin (the binaries, ~600 MB), logs. A fresh clone on
# the same machine reuses it. The image is tagged $KIND_NODE_IMAGE (default
# cluster-provider/kind-node:v<k8s>) and labelled with a digest of this script and its inputs: an
# image with the same label is up to date and nothing is done.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

K8S_VERSION=${K8S_VERSION:?K8S_VERSION, e.g. 1.37.1}
ENVTEST_ASSETS=${ENVTEST_ASSETS:?ENVTEST_ASSETS: the folder with kube-apiserver, kube-controller-manager and etcd}
KIND_VERSION=v0.33.0 # the version in go.mod: its base files and pinned component versions
CONTAINERD_VERSION=v2.3.4
RUNC_VERSION=v1.4.3
CNI_PLUGINS_VERSION=v1.9.1
CRICTL_VERSION=v1.36.0
DEBIAN_SUITE=bookworm # systemd 252: trixie's systemd 257 refuses to boot on cgroup v1
PACKAGES=systemd,systemd-sysv,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,curl,jq,procps
cache=${KIND_CACHE:-$HOME/.cache/cluster-provider/kind}
image=${KIND_NODE_IMAGE:-cluster-provider/kind-node:v$K8S_VERSION}
bins=$cache/v$K8S_VERSION/bin
logs=$cache/v$K8S_VERSION/logs
export GOFLAGS=-mod=mod GOWORK=off

say() { printf '==> %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
took() { say "$1 took $(($SECONDS - $2)) s"; }
start_all=$SECONDS

hack/need-docker.sh "make kind-image" || exit 1
[ "$(id -u)" = 0 ] || die "make kind-image runs debootstrap and chroot: run it as root"
for f in kube-apiserver kube-controller-manager etcd; do
  [ -x "$ENVTEST_ASSETS/$f" ] || die "$ENVTEST_ASSETS/$f is missing: run make envtest first"
done

# The recipe digest: this script, the kind module version and the envtest binaries it copies.
recipe=$( (cat "$0"; echo "$K8S_VERSION $KIND_VERSION $PACKAGES"; sha256sum "$ENVTEST_ASSETS"/{kube-apiserver,kube-controller-manager,etcd} | cut -d' ' -f1) | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{index .Config.Labels "io.cluster-provider.recipe"}}' "$image" 2>/dev/null)" = "$recipe" ]; then
  say "$image is up to date (recipe $recipe)"
  exit 0
fi
mkdir -p "$bins" "$logs"
work=$(mktemp -d)
build=""
cleanup() {
  [ -n "$build" ] && docker rm -f "$build" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# moddir MODULE@VERSION: a writable copy of the module's source, to build it as its own main
# module (its go.mod, replaces and go.sum apply).
moddir() {
  local dir dest=$work/src/${1//[\/@]/_}
  dir=$(go mod download -json "$1" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -d "$dir" ] || die "cannot download $1 from the module proxy"
  mkdir -p "$work/src" && cp -r "$dir" "$dest" && chmod -R u+w "$dest"
  echo "$dest"
}

# need_pkg PKG: installs a Debian package if it is missing (refreshing the index once if needed).
need_pkg() {
  dpkg -s "$1" >/dev/null 2>&1 && return
  say "installing $1 from Debian's packages"
  apt-get install -y "$1" >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y "$1" >/dev/null; } ||
    die "cannot install the Debian package $1"
}

# have FILE...: all exist (a binary is only ever moved into place whole).
have() { local f; for f; do [ -x "$bins/$f" ] || return 1; done; }

# 1. The rootfs.
rootfs=$cache/rootfs/$DEBIAN_SUITE-$(echo "$PACKAGES" | sha256sum | cut -c1-12)
if [ ! -x "$rootfs/sbin/init" ]; then
  need_pkg debootstrap
  say "debootstrap of Debian $DEBIAN_SUITE with kind's packages into $rootfs"
  t=$SECONDS
  rm -rf "$rootfs.tmp" && mkdir -p "$(dirname "$rootfs")"
  debootstrap --variant=minbase --include="$PACKAGES" "$DEBIAN_SUITE" "$rootfs.tmp" http://deb.debian.org/debian >"$logs/debootstrap.log" 2>&1 ||
    die "debootstrap failed; see $logs/debootstrap.log"
  rm -rf "$rootfs.tmp/var/cache/apt/archives/"*.deb "$rootfs.tmp/var/lib/apt/lists/"*
  mv "$rootfs.tmp" "$rootfs"
  took debootstrap $t
fi

# 2. The binaries.
k8s_cmds=(kubelet kubeadm kubectl kube-scheduler kube-proxy)
if ! have "${k8s_cmds[@]}"; then
  say "building ${k8s_cmds[*]} v$K8S_VERSION (cold: about 25 CPU-minutes, kubelet the most; log $logs/kubernetes.log)"
  t=$SECONDS
  hack/build-envtest.sh kubernetes "$K8S_VERSION" "$bins" "${k8s_cmds[@]}" >"$logs/kubernetes.log" 2>&1 || die "the Kubernetes build failed; see $logs/kubernetes.log"
  took "the Kubernetes build" $t
fi
for f in kube-apiserver kube-controller-manager etcd; do cp "$ENVTEST_ASSETS/$f" "$bins/$f.tmp" && mv "$bins/$f.tmp" "$bins/$f"; done

# gobuild NAME CGO_ENABLED GO-BUILD-ARGS...: go build in the current folder into $out, then
# move the outputs into $bins.
out=$work/out
gobuild() {
  local name=$1 cgo=$2 log=$logs/$1.log t=$SECONDS
  shift 2
  say "building $name (log $log)"
  rm -rf "$out" && mkdir -p "$out"
  CGO_ENABLED=$cgo go build -trimpath -o "$out/" "$@" >"$log" 2>&1 || die "building $name failed; see $log"
  mv "$out/"* "$bins/"
  took "$name" $t
}
if ! have containerd containerd-shim-runc-v2 ctr; then
  (cd "$(moddir github.com/containerd/containerd/v2@$CONTAINERD_VERSION)" &&
    gobuild containerd 0 -tags "no_aufs no_btrfs no_devmapper no_zfs" \
      -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
      ./cmd/containerd ./cmd/containerd-shim-runc-v2 ./cmd/ctr)
fi
if ! have runc; then
  need_pkg libseccomp-dev
  # kubeadm's static pods ask for the RuntimeDefault seccomp profile: runc needs seccomp.
  (cd "$(moddir github.com/opencontainers/runc@$RUNC_VERSION)" &&
    gobuild runc 1 -tags "seccomp urfave_cli_no_docs netgo osusergo" \
      -ldflags "-s -w -X main.version=${RUNC_VERSION#v} -extldflags -static" .)
fi
if ! have crictl; then
  (cd "$(moddir sigs.k8s.io/cri-tools@$CRICTL_VERSION)" &&
    gobuild crictl 0 -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" ./cmd/crictl)
fi
if ! have ptp host-local loopback portmap; then
  (cd "$(moddir github.com/containernetworking/plugins@$CNI_PLUGINS_VERSION)" &&
    gobuild cni-plugins 0 \
      -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" \
      ./plugins/main/ptp ./plugins/ipam/host-local ./plugins/main/loopback ./plugins/meta/portmap)
fi

# The images kubeadm pulls, by its own list: their versions come from kubeadm, not from here.
mapfile -t images < <("$bins/kubeadm" config images list --kubernetes-version "v$K8S_VERSION")
image_of() { printf '%s\n' "${images[@]}" | grep "/$1:" || die "kubeadm lists no $1 image: ${images[*]}"; }
coredns_image=$(image_of coredns)
pause_image=$(image_of pause)
coredns_version=${coredns_image##*:}
pause_version=${pause_image##*:}
if ! have coredns; then
  (cd "$(moddir github.com/coredns/coredns@$coredns_version)" &&
    gobuild coredns 0 -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$coredns_version" .)
fi
if ! have pause; then
  say "building pause $pause_version (gcc -static)"
  src=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/build/pause/linux/pause.c
  gcc -Os -Wall -Werror -static -DVERSION="$pause_version-cluster-provider" -o "$work/pause" "$src"
  strip "$work/pause" && mv "$work/pause" "$bins/pause"
fi

# 3. Component images: a rootfs with the binary (and, for kube-proxy, nft and its libraries: it
# runs in nftables mode), /tmp, CA certificates and a passwd file.
component_rootfs() {
  local dir=$work/img/$1
  mkdir -p "$dir"/{tmp,etc/ssl/certs,usr/local/bin}
  chmod 1777 "$dir/tmp"
  cp "$rootfs/etc/ssl/certs/ca-certificates.crt" "$dir/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$dir/etc/passwd"
  echo "$dir"
}
# with_libs DIR FILE...: copies rootfs files and the shared libraries they load into DIR.
with_libs() {
  local dir=$1 f lib
  shift
  for f; do
    mkdir -p "$dir$(dirname "$f")" && cp -L "$rootfs$f" "$dir$f"
    for lib in $(chroot "$rootfs" ldd "$f" | grep -o '/[^ ]*'); do
      mkdir -p "$dir$(dirname "$lib")" && cp -L "$rootfs$lib" "$dir$lib"
    done
  done
}
say "making the component images: ${images[*]}"
saved=()
for ref in "${images[@]}"; do
  name=${ref##*/}
  name=${name%%:*}
  dir=$(component_rootfs "$name")
  entry='[]'
  case $name in
  kube-apiserver | kube-controller-manager | kube-scheduler | etcd) cp "$bins/$name" "$dir/usr/local/bin/" ;;
  kube-proxy)
    cp "$bins/kube-proxy" "$dir/usr/local/bin/"
    with_libs "$dir" /usr/sbin/nft
    ;;
  coredns) cp "$bins/coredns" "$dir/coredns" && entry='["/coredns"]' ;;
  pause) cp "$bins/pause" "$dir/pause" && entry='["/pause"]' ;;
  *) die "no recipe for the image $ref" ;;
  esac
  tar -C "$dir" -c . | docker import -c "ENTRYPOINT $entry" -c 'ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$ref" >/dev/null
  saved+=("$ref")
done
docker save -o "$work/images.tar" "${saved[@]}"
docker rmi "${saved[@]}" >/dev/null

# 4. The node image.
base=cluster-provider/kind-rootfs:$(basename "$rootfs")
if ! docker image inspect "$base" >/dev/null 2>&1; then
  say "importing the rootfs as $base"
  tar -C "$rootfs" -c . | docker import - "$base" >/dev/null
fi
ctx=$work/node
files=$ctx/files
kindfiles=$(go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/images/base/files
mkdir -p "$files"
cp -r "$kindfiles"/{etc,kind,usr} "$files/"
chmod -R u+w,go-w "$files"
find "$files" -type d -exec chmod 755 {} + && find "$files" -type f -exec chmod 644 {} +
chmod 755 "$files/usr/local/bin/"* "$files/kind/bin/"*
mkdir -p "$files/usr/bin" "$files/usr/local/sbin" "$files/opt/cni/bin" "$files/kind/manifests"
cp "$bins"/{kubelet,kubeadm,kubectl} "$files/usr/bin/"
cp "$bins"/{containerd,containerd-shim-runc-v2,ctr,crictl} "$files/usr/local/bin/"
cp "$bins/runc" "$files/usr/local/sbin/"
cp "$bins"/{ptp,host-local,loopback,portmap} "$files/opt/cni/bin/"
echo -n "v$K8S_VERSION" >"$files/kind/version"
# As kind's base image: the runtime spec of `ctr oci spec`, with kind's product-files hook and no
# rlimits.
"$bins/ctr" oci spec |
  jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
  jq 'del(.process.rlimits)' >"$files/etc/containerd/cri-base.json"
sed -i "s|sandbox_image = .*|sandbox_image = \"$pause_image\"|" "$files/etc/containerd/config.toml"
# cgroup v1 hosts: kubelets after 1.34 refuse to start on them unless told otherwise.
sed -i 's|^KUBELET_EXTRA_ARGS=.*|& --fail-cgroupv1=false|' "$files/etc/default/kubelet"
# No storage provisioner image can be had offline: a default StorageClass with no provisioner, so
# kind does not fall back to its host-path one (which nothing serves either).
cat >"$files/kind/manifests/default-storage.yaml" <<'EOF'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
EOF
cat >"$files/usr/local/bin/cluster-provider-entrypoint" <<'EOF'
#!/bin/bash
# In front of kind's entrypoint: prepares a node that the engine started without --privileged
# (it refused it; backend/kind then asks for every capability it has instead). Harmless when
# privileged.
set -euo pipefail
# An unprivileged container gets its cgroup hierarchy read-only; systemd and the kubelet write it.
while read -r target opts; do
  case ",$opts," in *,ro,*) mount -o remount,bind,rw "$target" ;; esac
done < <(findmnt -rn -o TARGET,OPTIONS -R /sys/fs/cgroup)
# Without CAP_SYS_RESOURCE nothing may lower an oom_score_adj (the kubelet asks -997 for critical
# pods): containerd keeps them at or above its own, as kind does for rootless nodes.
if (( (0x$(awk '/^CapEff/ {print $2}' /proc/self/status) >> 24 & 1) == 0 )); then
  echo 'INFO: no CAP_SYS_RESOURCE: restricting containerd oom_score_adj' >&2
  sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml
fi
# The engine's storage driver fuse-overlayfs makes kind pick containerd's fuse-overlayfs
# snapshotter, which this image does not have; containerd's data is on the /var volume, where
# overlayfs works.
if [ -z "${KIND_EXPERIMENTAL_CONTAINERD_SNAPSHOTTER:-}" ] && [ "$(stat -f -c %T /kind)" = fuseblk ] &&
  [ "$(stat -f -c %T /var)" != fuseblk ]; then
  export KIND_EXPERIMENTAL_CONTAINERD_SNAPSHOTTER=overlayfs
fi
exec /usr/local/bin/entrypoint "$@"
EOF
chmod 755 "$files/usr/local/bin/cluster-provider-entrypoint"
cat >"$ctx/Dockerfile" <<EOF
FROM $base
COPY files/ /
RUN find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete \\
 && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \\
 && echo ReadKMsg=no >> /etc/systemd/journald.conf \\
 && ln -sf /usr/lib/systemd/systemd /sbin/init \\
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \\
 && systemctl mask systemd-binfmt.service \\
 && mkdir -p /etc/kubernetes/manifests
ENV container=docker
STOPSIGNAL SIGRTMIN+3
EOF
say "building the node image's file system"
t=$SECONDS
DOCKER_BUILDKIT=0 docker build -q -t "$image-stage" "$ctx" >"$logs/docker-build.log" 2>&1 || die "docker build failed; see $logs/docker-build.log"

say "importing the component images into the node's containerd"
build=cluster-provider-kind-build-$$
docker run -d --init --name "$build" --entrypoint sleep --security-opt seccomp=unconfined "$image-stage" infinity >/dev/null
docker exec "$build" bash -c 'nohup containerd >/tmp/containerd.log 2>&1 &'
for i in $(seq 30); do docker exec "$build" ctr version >/dev/null 2>&1 && break; sleep 1; done
docker exec "$build" ctr version >/dev/null || die "containerd did not start in the build container: $(docker exec "$build" tail -5 /tmp/containerd.log)"
docker exec -i "$build" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
  --all-platforms --no-unpack --digests - <"$work/images.tar" >"$logs/ctr-import.log" 2>&1 || die "ctr import failed; see $logs/ctr-import.log"
imported=$(docker exec "$build" ctr --namespace=k8s.io images list -q)
for ref in "${images[@]}"; do
  grep -qx "$ref" <<<"$imported" || die "$ref is not in the node's containerd after the import: $imported"
done
docker exec "$build" bash -c 'pkill containerd; while pgrep -x containerd >/dev/null; do sleep 0.2; done; rm -rf /tmp/* /run/containerd'
old=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
docker commit \
  --change 'ENTRYPOINT ["/usr/local/bin/cluster-provider-entrypoint"]' --change 'CMD ["/sbin/init"]' \
  --change "LABEL io.cluster-provider.recipe=$recipe" --change "LABEL io.cluster-provider.kubernetes=v$K8S_VERSION" \
  "$build" "$image" >/dev/null
docker rm -f "$build" >/dev/null && build=""
docker rmi "$image-stage" >/dev/null
[ -z "$old" ] || docker rmi "$old" >/dev/null 2>&1 || true # the previous build, now untagged
took "the node image" $t
say "$image ready ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'), images: ${images[*]}); all took $((SECONDS - start_all)) s"
