#!/usr/bin/env bash
# Builds one control-plane binary for envtest from the Go module proxy.
#
#   hack/build-envtest.sh kube-apiserver <k8s-version> <out-file>
#   hack/build-envtest.sh etcd           <etcd-version> <out-file>
#
# Release hosts are unreachable here, so setup-envtest cannot download binaries. Instead a
# throw-away module requires the upstream module at the pinned version (for Kubernetes, each
# k8s.io/<staging> module is replaced by its published v0.Y.Z) and builds the command with its
# version stamped in through -ldflags, so `--version` says what it is. The output is written
# atomically: an interrupted build leaves no half-written binary behind.
set -euo pipefail

what=${1:?binary: kube-apiserver or etcd}
version=${2:?version without the leading v}
out=${3:?output file}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
go mod init envtest-build >/dev/null 2>&1

case "$what" in
kube-apiserver)
  minor=$(echo "$version" | cut -d. -f2)
  staging_version="v0.${version#*.}"
  # Every k8s.io/<staging> module that k8s.io/kubernetes replaces with ./staging/src/... .
  gomod=$(go mod download -json "k8s.io/kubernetes@v${version}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$gomod" ] || { echo "cannot read go.mod of k8s.io/kubernetes@v${version}" >&2; exit 1; }
  for m in $(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod"); do
    go mod edit -replace="${m}=${m}@${staging_version}"
  done
  go mod edit -require="k8s.io/kubernetes@v${version}"
  pkg=k8s.io/kubernetes/cmd/kube-apiserver
  vpkg=k8s.io/component-base/version
  ldflags="-s -w -X ${vpkg}.gitVersion=v${version} -X ${vpkg}.gitMajor=1 -X ${vpkg}.gitMinor=${minor}"
  ldflags+=" -X ${vpkg}.gitTreeState=clean -X ${vpkg}.buildDate=1970-01-01T00:00:00Z"
  ;;
etcd)
  for m in api/v3 client/pkg/v3 client/v3 pkg/v3; do
    go mod edit -replace="go.etcd.io/etcd/${m}=go.etcd.io/etcd/${m}@v${version}"
  done
  go mod edit -require="go.etcd.io/etcd/server/v3@v${version}"
  pkg=go.etcd.io/etcd/server/v3
  ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=v${version}"
  ;;
*)
  echo "unknown binary ${what}: want kube-apiserver or etcd" >&2
  exit 2
  ;;
esac

echo "building ${what} v${version} from the module proxy (cold: kube-apiserver takes minutes)" >&2
go build -trimpath -ldflags "$ldflags" -o "$work/$what" "$pkg"
# Check the binary runs before it is installed. Capture the whole output: piping into
# `head -1` would kill etcd (multi-line --version) with SIGPIPE under pipefail.
reported=$("$work/$what" --version)
echo "${reported%%$'\n'*}" >&2
mkdir -p "$(dirname "$out")"
mv "$work/$what" "$out.tmp"
mv "$out.tmp" "$out"
