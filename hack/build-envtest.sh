#!/usr/bin/env bash
# Builds control-plane binaries from the Go module proxy.
#
#   hack/build-envtest.sh kube-apiserver          <k8s-version>  <out-file>
#   hack/build-envtest.sh kube-controller-manager <k8s-version>  <out-file>
#   hack/build-envtest.sh kubernetes              <k8s-version>  <out-dir> [cmd ...]
#                                  # kube-apiserver and kube-controller-manager (or the named
#                                  # k8s.io/kubernetes/cmd/<cmd>s, e.g. kubelet) in one go build
#   hack/build-envtest.sh e2e.test                <k8s-version>  <out-file>  # upstream e2e suite
#   hack/build-envtest.sh etcd                    <etcd-version> <out-file>
#   hack/build-envtest.sh etcdctl                 <etcd-version> <out-file>  # takes snapshots
#   hack/build-envtest.sh etcdutl                 <etcd-version> <out-file>  # verifies, restores
#
# Release hosts are unreachable here, so setup-envtest cannot download binaries. Instead a
# throw-away module requires the upstream module at the pinned version (for Kubernetes, each
# k8s.io/<staging> module is replaced by its published v0.Y.Z) and builds the command with its
# version stamped in through -ldflags, so `--version` says what it is. `kubernetes` builds
# kube-apiserver and kube-controller-manager in ONE `go build`: they share most packages, so the
# second costs little more than its own linking. Every output is written atomically: an
# interrupted build leaves no half-written binary behind.
set -euo pipefail

what=${1:?binary: kube-apiserver, kube-controller-manager, kubernetes, e2e.test, etcd, etcdctl or etcdutl}
version=${2:?version without the leading v}
out=${3:?output file (or folder, for kubernetes)}
shift 3
extra_cmds=("$@")
# The build runs in a throw-away folder: a relative output path is the caller's.
case "$out" in /*) ;; *) out=$PWD/$out ;; esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
go mod init envtest-build >/dev/null 2>&1

# kubernetes_module requires k8s.io/kubernetes at $version with its staging replaces, and sets
# ldflags to stamp the version.
kubernetes_module() {
  local minor staging_version gomod m vpkg
  minor=$(echo "$version" | cut -d. -f2)
  staging_version="v0.${version#*.}"
  # Every k8s.io/<staging> module that k8s.io/kubernetes replaces with ./staging/src/... .
  gomod=$(go mod download -json "k8s.io/kubernetes@v${version}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$gomod" ] || { echo "cannot read go.mod of k8s.io/kubernetes@v${version}" >&2; exit 1; }
  for m in $(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod"); do
    go mod edit -replace="${m}=${m}@${staging_version}"
  done
  go mod edit -require="k8s.io/kubernetes@v${version}"
  vpkg=k8s.io/component-base/version
  ldflags="-s -w -X ${vpkg}.gitVersion=v${version} -X ${vpkg}.gitMajor=1 -X ${vpkg}.gitMinor=${minor}"
  ldflags+=" -X ${vpkg}.gitTreeState=clean -X ${vpkg}.buildDate=1970-01-01T00:00:00Z"
}

# install checks that a built binary runs, then moves it to its place.
install_bin() {
  local built=$1 dest=$2 reported
  # Capture the whole output: piping into `head -1` would kill etcd (multi-line --version) with
  # SIGPIPE under pipefail.
  case $(basename "$dest") in
  kubeadm) reported=$("$built" version -o short) ;;
  kubectl) reported=$("$built" version --client) ;;
  etcdctl | etcdutl) reported=$("$built" version) ;;
  *) reported=$("$built" --version) ;;
  esac
  echo "${reported%%$'\n'*}" >&2
  mkdir -p "$(dirname "$dest")"
  mv "$built" "$dest.tmp"
  mv "$dest.tmp" "$dest"
}

start=$SECONDS
case "$what" in
kube-apiserver | kube-controller-manager | kubernetes)
  kubernetes_module
  cmds=("$what")
  if [ "$what" = kubernetes ]; then
    cmds=(kube-apiserver kube-controller-manager)
    [ ${#extra_cmds[@]} -gt 0 ] && cmds=("${extra_cmds[@]}")
  fi
  pkgs=()
  for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  echo "building ${cmds[*]} v${version} from the module proxy (cold: about 20 CPU-minutes for the first two)" >&2
  mkdir -p "$work/out"
  go build -trimpath -ldflags "$ldflags" -o "$work/out/" "${pkgs[@]}"
  for c in "${cmds[@]}"; do
    if [ "$what" = kubernetes ]; then install_bin "$work/out/$c" "$out/$c"; else install_bin "$work/out/$c" "$out"; fi
  done
  ;;
e2e.test)
  kubernetes_module
  echo "building the upstream e2e.test v${version} from the module proxy (cold: about 20 CPU-minutes; more with other builds beside it)" >&2
  # k8s.io/kubernetes is one module: its go.mod already requires what test/e2e imports (ginkgo,
  # gomega, ...). No `go get`: it would raise the staging requirements from v0.0.0 and so miss the
  # build cache that kube-apiserver's build filled.
  go test -c -vet=off -trimpath -ldflags "$ldflags" -o "$work/e2e.test" k8s.io/kubernetes/test/e2e
  mkdir -p "$(dirname "$out")"
  mv "$work/e2e.test" "$out.tmp"
  mv "$out.tmp" "$out"
  ;;
etcd | etcdctl | etcdutl)
  # etcd is the module go.etcd.io/etcd/server/v3; etcdctl and etcdutl are modules of their own
  # that require it (etcdutl restores with the server's code). Every sibling module is pinned to
  # the same version, as etcd's own release build does with its replaces.
  pkg=go.etcd.io/etcd/server/v3
  [ "$what" = etcd ] || pkg=go.etcd.io/etcd/${what}/v3
  for m in api/v3 client/pkg/v3 client/v3 pkg/v3 server/v3; do
    go mod edit -replace="go.etcd.io/etcd/${m}=go.etcd.io/etcd/${m}@v${version}"
  done
  go mod edit -require="${pkg}@v${version}"
  echo "building ${what} v${version} from the module proxy" >&2
  go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=v${version}" -o "$work/$what" "$pkg"
  install_bin "$work/$what" "$out"
  ;;
*)
  echo "unknown binary ${what}: want kube-apiserver, kube-controller-manager, kubernetes, e2e.test, etcd, etcdctl or etcdutl" >&2
  exit 2
  ;;
esac
echo "built ${what} in $((SECONDS - start)) s" >&2
