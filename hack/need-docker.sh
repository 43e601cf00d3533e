#!/usr/bin/env bash
# need-docker.sh WHAT: exits 0 if a Docker engine answers; else says plainly why WHAT cannot run
# here, and exits 1.
set -euo pipefail
what=${1:-this target}
if ! command -v docker >/dev/null 2>&1; then
  echo "$what needs Docker, and there is no docker command on this machine." >&2
  exit 1
fi
if ! docker info >/dev/null 2>&1; then
  echo "$what needs a Docker engine, and none answers here (docker info fails: the client is installed, no daemon runs)." >&2
  echo "Run it on a machine with a Docker engine; everything else is covered by 'make test'." >&2
  exit 1
fi
