#!/usr/bin/env bash
# Builds SeaweedFS's `weed`, the real S3-compatible server the object-store tests run
# (test/testenv/s3.go), from the Go module proxy:
#
#   hack/build-s3server.sh <out-file>
#
# The version is the one hack/tools/s3server/go.mod pins. That small tool module exists because
# SeaweedFS's go.mod has a replace directive, which `go install module@version` refuses; a module
# requiring it with the same replace builds it. The output is written atomically: an interrupted
# build leaves no half-written binary behind.
set -euo pipefail

out=${1:?output file, e.g. ~/.cache/cluster-provider/s3/<version>/weed}
case "$out" in /*) ;; *) out=$PWD/$out ;; esac

cd "$(dirname "$0")/tools/s3server"
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
go build -trimpath -ldflags '-s -w' -o "$tmp" github.com/seaweedfs/seaweedfs/weed
"$tmp" version >/dev/null
mv "$tmp" "$out"
trap - EXIT
echo "$out: $("$out" version 2>&1 | head -1)"
