#!/usr/bin/env bash
# `make conformance`: the upstream Kubernetes conformance suite against a local cluster that the
# operator makes, reached the way users reach it.
#
# 1. hack/run.sh (what `make run` runs) in the background, on its own folder .conformance/run:
#    a platform control plane, the operator, the sample ProviderConfig and Cluster.
# 2. An AccessRequest bound to cluster-admin for the sample Cluster: its kubeconfig Secret is the
#    suite's only way in (the product's own path).
# 3. e2e.test (E2E_TEST, built by `make conformance` from the module proxy) with the
#    [Conformance] focus, minus the explicit, reviewed list in hack/conformance/skip.txt (tests
#    that need a running Pod, a node, DNS...: each with its reason). The names are quoted and
#    anchored, never matched by a broad pattern.
# 4. The counts into .conformance/summary.txt; the JUnit report and logs stay in .conformance/.
# 5. The verdict from the JUnit report (hack/conformance/verify): exactly the tests of keep.txt
#    passed, none skipped itself at run time, no other test ran; the pass list is printed and
#    written to .conformance/passed.txt.
#
# The cluster is advertised on this machine's first IPv4 address (ADVERTISE_HOST), as a deployed
# operator advertises its pod's IP: the kubernetes Service then has Endpoints, which a loopback
# address may not be (one conformance test checks them). Its API server listens on every
# interface while the suite runs.
#
# Environment: ENVTEST_ASSETS, E2E_TEST, GINKGO (required; the Makefile sets them), PROCS (4
# parallel ginkgo processes), ADVERTISE_HOST,
# FOCUS (override the focus, e.g. one test while debugging), E2E_ARGS (more e2e.test flags).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/.conformance
assets=${ENVTEST_ASSETS:?set ENVTEST_ASSETS (make conformance does)}
e2e=${E2E_TEST:?set E2E_TEST to the e2e.test binary (make conformance does)}
ginkgo=${GINKGO:?set GINKGO to the ginkgo CLI (make conformance builds it)}
procs=${PROCS:-4}
focus=${FOCUS:-'\[Conformance\]'}
read -r -a e2e_args <<<"${E2E_ARGS:-}"
advertise=${ADVERTISE_HOST:-$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -m1 -E '^[0-9]+\.' || echo 127.0.0.1)}

say() { printf '==> %s\n' "$*" >&2; }

rm -rf "$out"
mkdir -p "$out/report"

# names prints the test names of a list file (comments and reasons removed).
names() { sed -e '/^#/d' -e '/^[[:space:]]*$/d' -e 's/ # .*$//' "$1"; }
# The skip list: every name regexp-quoted and anchored at its end, joined with |. (Ginkgo matches
# against a text that does not always start with the name's first word, so no ^.)
skip=$(names "$root/hack/conformance/skip.txt" | sed -e 's/[][\.*^$(){}?+|/]/\\&/g' -e 's/$/$/' | paste -sd '|' -)
skipped=$(names "$root/hack/conformance/skip.txt" | wc -l)

# The lists are checked before anything runs: a dry run must select exactly keep.txt, so no
# skip entry misses its test and none hides another.
if [ "$focus" = '\[Conformance\]' ]; then
  "$e2e" --ginkgo.dry-run --ginkgo.v --ginkgo.no-color --ginkgo.focus="$focus" --ginkgo.skip="$skip" >"$out/dry-run.log" 2>&1 || true
  # A selected spec's header line is followed by its source location; its labels end the line.
  grep -B1 '^k8s.io/kubernetes' "$out/dry-run.log" | grep '^\[sig-' |
    sed -E -e 's/ \[[^]]*, [^]]*\]$//' -e 's/ \[sig-[a-z-]+\]$//' | sort >"$out/selected.txt"
  if ! diff <(names "$root/hack/conformance/keep.txt" | sort) "$out/selected.txt" >"$out/selection.diff"; then
    say "the tests selected differ from hack/conformance/keep.txt (< keep.txt, > selected):"
    cat "$out/selection.diff" >&2
    exit 1
  fi
  say "The dry run selects exactly the $(wc -l <"$out/selected.txt") tests of hack/conformance/keep.txt"
fi

say "Starting the operator and a platform control plane (hack/run.sh, logs in $out/run.log)"
RUN_DIR=$out/run PROVIDER_NAME=local METRICS_BIND_ADDRESS=0 HEALTH_PROBE_BIND_ADDRESS=127.0.0.1:0 \
  RUN_ARGS="--local-advertise-host=$advertise" \
  ENVTEST_ASSETS=$assets env -u KUBECONFIG "$root/hack/run.sh" >"$out/run.log" 2>&1 &
run_pid=$!
export KUBECONFIG=$out/run/kubeconfig # the platform control plane run.sh starts
stop() {
  local code=$?
  say "Stopping the operator and the control plane"
  kill -TERM "$run_pid" 2>/dev/null || true
  wait "$run_pid" 2>/dev/null || true
  exit "$code"
}
trap stop EXIT

deadline=$((SECONDS + 600))
until kubectl get cluster sample -n default >/dev/null 2>&1; do
  kill -0 "$run_pid" 2>/dev/null || { say "hack/run.sh exited; see $out/run.log"; tail -20 "$out/run.log" >&2; exit 1; }
  [ "$SECONDS" -lt "$deadline" ] || { say "the sample Cluster did not appear within 600 s"; exit 1; }
  sleep 1
done
say "Waiting for the sample Cluster to be Ready"
kubectl wait -n default cluster/sample --for=jsonpath='{.status.phase}'=Ready --timeout=300s

say "Asking for cluster-admin through an AccessRequest"
kubectl apply -f - <<'YAML'
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: AccessRequest
metadata:
  name: conformance
  namespace: default
spec:
  clusterRef:
    name: sample
    namespace: default
  token:
    roleRefs:
    - kind: ClusterRole
      name: cluster-admin
YAML
kubectl wait -n default accessrequest/conformance --for=jsonpath='{.status.phase}'=Granted --timeout=300s
kubectl get secret -n default conformance.kubeconfig -o jsonpath='{.data.kubeconfig}' | base64 -d >"$out/cluster.kubeconfig"
chmod 600 "$out/cluster.kubeconfig"

say "Running e2e.test: focus $focus, $skipped tests skipped by hack/conformance/skip.txt (log: $out/e2e.log)"
start=$SECONDS
rc=0
e2e_flags=(--kubeconfig="$out/cluster.kubeconfig" --provider=skeleton --num-nodes=1
  --kubectl-path="$(command -v kubectl)" --report-dir="$out/report")
# ginkgo runs the suite in $procs processes; the [Serial] tests run alone at the end. The tests
# mostly wait for the cluster, so more processes than cores pay.
"$ginkgo" --procs="$procs" --no-color -v --timeout=4h --focus="$focus" --skip="$skip" \
  "$e2e" -- "${e2e_flags[@]}" ${e2e_args[@]+"${e2e_args[@]}"} >"$out/e2e.log" 2>&1 || rc=$?
elapsed=$((SECONDS - start))

{
  echo "e2e.test $("$e2e" --version 2>/dev/null | head -1 || true), exit code $rc, ${elapsed} s"
  grep -E '^(Ran [0-9]+ of [0-9]+ Specs|FAIL!|SUCCESS!|PASS|FAIL)' "$out/e2e.log" | tail -3 || true
  echo "Failures:"
  grep -E '^\s*\[FAIL\]' "$out/e2e.log" | sort -u || echo "  none"
} | tee "$out/summary.txt" >&2

# e2e.test's exit code is not the verdict: a test that skips itself at run time counts as a
# success there. The JUnit report is: exactly the tests of keep.txt passed, nothing else did
# (hack/conformance/verify). The pass list is printed and kept in $out/passed.txt.
if [ "$focus" = '\[Conformance\]' ]; then
  say "Checking the JUnit report against hack/conformance/keep.txt"
  verdict=0
  (cd "$root" && go run ./hack/conformance/verify --junit "$out/report/junit_01.xml" \
    --keep hack/conformance/keep.txt --passed "$out/passed.txt") 2>"$out/verdict.txt" || verdict=$?
  if [ "$verdict" -eq 0 ]; then
    say "Passed ($(wc -l <"$out/passed.txt") tests, also in $out/passed.txt):"
    sed 's/^/  /' "$out/passed.txt" >&2
  else
    rc=1
  fi
  tee -a "$out/summary.txt" <"$out/verdict.txt" >&2
else
  say "FOCUS is set: the result is not checked against the keep list"
fi
exit "$rc"
