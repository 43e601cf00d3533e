#!/usr/bin/env bash
# `make run`: the operator in the foreground against a local control plane.
#
# The operator's local backend runs each Cluster's etcd, kube-apiserver and kube-controller-manager
# from the same binaries, with their state in .run/clusters/ (kept across restarts like the rest
# of .run/).
#
# Without KUBECONFIG it starts etcd and kube-apiserver (cmd/devcluster, with the envtest binaries
# in $ENVTEST_ASSETS) and keeps their state under .run/, so objects survive a restart; with
# KUBECONFIG set it uses that cluster and starts nothing. Then it runs `cluster-provider init`,
# applies deploy/samples/, and runs `cluster-provider run --provider-name local` with the scheduler
# (configured by deploy/samples/config/operator.yaml, or $CONFIG) until Ctrl-C (or SIGTERM), which
# stops the operator and the control plane and checks that none of their processes is left.
#
# Environment: ENVTEST_ASSETS (required; `make run` sets it), RUN_DIR (.run), KUBECONFIG, PROVIDER_NAME (local),
# CONFIG (deploy/samples/config/operator.yaml), CONTROLLERS (accessrequest,providerconfig,scheduler),
# METRICS_BIND_ADDRESS (127.0.0.1:8080), HEALTH_PROBE_BIND_ADDRESS (127.0.0.1:8081), RUN_ARGS
# (more flags for `cluster-provider run`, e.g. --zap-log-level=debug).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
run_dir=${RUN_DIR:-$root/.run}
bin=$run_dir/bin
assets=${ENVTEST_ASSETS:?set ENVTEST_ASSETS to the folder of the envtest binaries (make run does)}
provider=${PROVIDER_NAME:-local}
config=${CONFIG:-$root/deploy/samples/config/operator.yaml}
controllers=${CONTROLLERS:-accessrequest,providerconfig,scheduler}
metrics=${METRICS_BIND_ADDRESS:-127.0.0.1:8080}
probes=${HEALTH_PROBE_BIND_ADDRESS:-127.0.0.1:8081}
read -r -a run_args <<<"${RUN_ARGS:-}"

say() { printf '==> %s\n' "$*" >&2; }

# ours prints the PIDs of every process of a `make run` on this folder: the operator and
# devcluster by their binaries, etcd and kube-apiserver by their data and certificate folders, and
# the local clusters' processes by their folders under clusters/.
# (awk builds the strings itself, so that its own command line does not match.)
ours() {
  ps -eo pid=,args= | awk -v d="$run_dir" '
    index($0, d "/bin/cluster-provider ") || index($0, d "/bin/devcluster ") ||
    index($0, "--data-dir=" d "/etcd") || index($0, "--cert-dir=" d "/apiserver") ||
    index($0, d "/clusters/") { print $1 }'
}

# stop waits up to grace seconds for a child to exit by itself (after Ctrl-C it got SIGINT from
# the terminal like this script; a second signal would make it give up on a clean stop), then
# sends SIGTERM, reaps it and returns its exit code.
stop() {
  local pid=$1 grace=$2 end=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null
}

op_pid=""
dev_pid=""
grace=0
cleanup() {
  local code=$?
  trap - EXIT INT TERM
  local rc
  if [ -n "$op_pid" ]; then
    stop "$op_pid" "$grace" && rc=0 || rc=$?
    if [ "$rc" -ne 0 ]; then say "The operator exited with code $rc"; code=1; fi
  fi
  if [ -n "$dev_pid" ]; then
    say "Stopping the control plane"
    stop "$dev_pid" "$grace" && rc=0 || rc=$?
    if [ "$rc" -ne 0 ]; then say "The control plane stopped with code $rc; see $run_dir/logs/"; code=1; fi
  fi
  local left
  left=$(ours | paste -sd ' ' -)
  if [ -n "$left" ]; then
    say "Still running after the stop, killing: $left"
    ps -o pid=,args= -p "${left// /,}" >&2 || true
    # shellcheck disable=SC2086 # one PID per word
    kill -KILL $left 2>/dev/null || true
    code=1
  else
    say "Stopped; no process of this run is left."
  fi
  exit "$code"
}

left=$(ours | paste -sd ' ' -)
if [ -n "$left" ]; then
  say "Another 'make run' on $run_dir is still running (PIDs $left); stop it first (kill $left)."
  exit 1
fi

mkdir -p "$bin"
say "Building cluster-provider and devcluster into $bin"
(cd "$root" && go build -o "$bin/cluster-provider" ./cmd/cluster-provider && go build -o "$bin/devcluster" ./cmd/devcluster)

# Ctrl-C and SIGTERM mean "stop": exit 0 unless stopping fails.
trap cleanup EXIT
trap 'grace=10; exit 0' INT
trap 'exit 0' TERM

if [ -n "${KUBECONFIG:-}" ]; then
  say "KUBECONFIG is set: using its cluster ($KUBECONFIG); no local control plane is started"
else
  kubeconfig=$run_dir/kubeconfig
  rm -f "$kubeconfig"
  say "Starting a local control plane (etcd + kube-apiserver from $assets); state in $run_dir, logs in $run_dir/logs"
  "$bin/devcluster" up --dir "$run_dir" --assets "$assets" &
  dev_pid=$!
  deadline=$((SECONDS + 180))
  until [ -s "$kubeconfig" ]; do
    if ! kill -0 "$dev_pid" 2>/dev/null; then
      say "The control plane did not start; see $run_dir/logs/"
      exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      say "The control plane did not start within 180s; see $run_dir/logs/"
      exit 1
    fi
    sleep 0.2
  done
  export KUBECONFIG=$kubeconfig
fi

say "Installing the CRDs (cluster-provider init)"
"$bin/cluster-provider" init
say "Applying the samples in deploy/samples/"
"$bin/devcluster" apply "$root"/deploy/samples/*.yaml

stops="it"
if [ -n "$dev_pid" ]; then stops="it and the local control plane"; fi
cat >&2 <<EOF
==> Starting the operator (provider name $provider); Ctrl-C stops $stops.
==> Kubeconfig: $KUBECONFIG
==> Try, in another terminal:
      export KUBECONFIG=$KUBECONFIG
      kubectl get providerconfigs
      kubectl get clusterprofiles
      kubectl get clusters -w          # sample, and exclusive-<hash> for sample-request: Ready in seconds
      kubectl get clusterrequests      # sample-request: Granted, with its Cluster
      kubectl get accessrequests       # sample-viewer, sample-request-viewer: Granted once their Cluster is Ready
      kubectl get secret sample-viewer.kubeconfig -o jsonpath='{.data.kubeconfig}' | base64 -d > /tmp/sample.kubeconfig
      kubectl --kubeconfig /tmp/sample.kubeconfig get namespaces
      kubectl --kubeconfig /tmp/sample.kubeconfig get pods -A     # the stock role view
      curl -s http://$probes/readyz
EOF
"$bin/cluster-provider" run --provider-name "$provider" \
  --controllers "$controllers" --config "$config" \
  --metrics-bind-address "$metrics" --health-probe-bind-address "$probes" \
  --local-binaries "$assets" --state-dir "$run_dir/clusters" \
  --zap-encoder console ${run_args[@]+"${run_args[@]}"} &
op_pid=$!
code=0
wait "$op_pid" || code=$?
op_pid=""
say "The operator exited with code $code"
exit "$code"
