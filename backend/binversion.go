package backend

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
)

// ParseKubernetesVersion reads the version from `kube-apiserver --version` (or
// kube-controller-manager) output, which is "Kubernetes v1.37.1": "1.37.1".
func ParseKubernetesVersion(out string) (string, error) {
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	v, ok := strings.CutPrefix(strings.TrimSpace(line), "Kubernetes v")
	if ok {
		if p, err := version.ParseSemantic(v); err == nil {
			return p.String(), nil
		}
	}
	return "", fmt.Errorf("--version printed %q, not \"Kubernetes vX.Y.Z\"", line)
}

// ParseEtcdVersion reads the version from `etcd --version` output ("etcd Version: 3.6.6"), or "".
func ParseEtcdVersion(out string) string {
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "etcd Version:"); ok {
			if p, err := version.ParseSemantic(strings.TrimSpace(v)); err == nil {
				return p.String()
			}
		}
	}
	return ""
}

// CheckImageVersions says what is wrong with a control-plane image that carries Kubernetes
// kubernetes and etcd etcd (as their --version report them) for Kubernetes version want: its
// kube-apiserver must be of want's minor, its etcd of the release line want ships with
// (EtcdLine). "" when nothing is.
func CheckImageVersions(want, kubernetes, etcd string) string {
	line, err := EtcdLine(want)
	if err != nil {
		return fmt.Sprintf("Kubernetes %q is not a version", want)
	}
	w, _ := version.ParseGeneric(Normalize(want))
	k, kerr := version.ParseSemantic(Normalize(kubernetes))
	e, eerr := version.ParseSemantic(Normalize(etcd))
	switch {
	case kerr != nil:
		return fmt.Sprintf("its kube-apiserver reports no version (%q), and Kubernetes %s needs kube-apiserver %d.%d", kubernetes, Normalize(want), w.Major(), w.Minor())
	case k.Major() != w.Major() || k.Minor() != w.Minor():
		return fmt.Sprintf("it carries kube-apiserver %s, and Kubernetes %s needs kube-apiserver %d.%d", k, Normalize(want), w.Major(), w.Minor())
	case eerr != nil:
		return fmt.Sprintf("its etcd reports no version (%q), and Kubernetes %s needs etcd 3.%d", etcd, Normalize(want), line)
	case e.Major() != 3 || int(e.Minor()) != line:
		return fmt.Sprintf("it carries etcd %s, and Kubernetes %s needs etcd 3.%d", e, Normalize(want), line)
	}
	return ""
}

// VersionTimeout bounds one `--version` call of RunVersion.
const VersionTimeout = 30 * time.Second

// RunVersion runs bin --version (at most VersionTimeout) and returns what it printed; the error
// carries that output.
func RunVersion(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, VersionTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}
