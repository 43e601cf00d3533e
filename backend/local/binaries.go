package local

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
)

// Binaries is one --local-binaries folder: a kube-apiserver, a kube-controller-manager of the same
// version and an etcd.
type Binaries struct {
	// Dir is the folder.
	Dir string
	// Version is the Kubernetes version its kube-apiserver reports, without "v" (1.37.1).
	Version string
}

// APIServer is the path of the folder's kube-apiserver.
func (b Binaries) APIServer() string { return filepath.Join(b.Dir, "kube-apiserver") }

// ControllerManager is the path of the folder's kube-controller-manager.
func (b Binaries) ControllerManager() string { return filepath.Join(b.Dir, "kube-controller-manager") }

// Etcd is the path of the folder's etcd.
func (b Binaries) Etcd() string { return filepath.Join(b.Dir, "etcd") }

// versionTimeout bounds one `--version` call.
const versionTimeout = 30 * time.Second

// LoadBinaries inspects each folder once: it must hold executable kube-apiserver,
// kube-controller-manager and etcd files; the Kubernetes version it offers is what
// `kube-apiserver --version` prints (folder names mean nothing), and kube-controller-manager must
// print the same. Two folders of the same version are an error. The error names the folder, the
// file and what is wrong with it.
func LoadBinaries(ctx context.Context, dirs []string) ([]Binaries, error) {
	var out []Binaries
	seen := map[string]string{}
	for _, dir := range dirs {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("--local-binaries folder %s: %w", dir, err)
		}
		b := Binaries{Dir: abs}
		for _, bin := range []string{b.APIServer(), b.ControllerManager(), b.Etcd()} {
			if err := executable(bin); err != nil {
				return nil, fmt.Errorf("--local-binaries folder %s: %w (it must hold kube-apiserver, kube-controller-manager and etcd; `make envtest` builds them)", dir, err)
			}
		}
		if _, err := runVersion(ctx, b.Etcd()); err != nil {
			return nil, fmt.Errorf("--local-binaries folder %s: etcd --version: %w", dir, err)
		}
		out1, err := runVersion(ctx, b.APIServer())
		if err != nil {
			return nil, fmt.Errorf("--local-binaries folder %s: kube-apiserver --version: %w", dir, err)
		}
		b.Version, err = parseKubernetesVersion(out1)
		if err != nil {
			return nil, fmt.Errorf("--local-binaries folder %s: kube-apiserver %w", dir, err)
		}
		out2, err := runVersion(ctx, b.ControllerManager())
		if err != nil {
			return nil, fmt.Errorf("--local-binaries folder %s: kube-controller-manager --version: %w", dir, err)
		}
		if v, err := parseKubernetesVersion(out2); err != nil || v != b.Version {
			return nil, fmt.Errorf("--local-binaries folder %s: %s reports %q, but kube-apiserver is v%s; both must be the same version (`make envtest` builds them together)",
				dir, b.ControllerManager(), strings.TrimSpace(out2), b.Version)
		}
		if other, dup := seen[b.Version]; dup {
			return nil, fmt.Errorf("--local-binaries folders %s and %s both serve Kubernetes %s; give each version once", other, dir, b.Version)
		}
		seen[b.Version] = dir
		out = append(out, b)
	}
	return out, nil
}

func executable(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return err
	case fi.IsDir() || fi.Mode()&0o111 == 0:
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

func runVersion(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// parseKubernetesVersion reads the version from `kube-apiserver --version` (or
// kube-controller-manager) output, which is "Kubernetes v1.37.1".
func parseKubernetesVersion(out string) (string, error) {
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	v, ok := strings.CutPrefix(strings.TrimSpace(line), "Kubernetes v")
	if ok {
		if p, err := version.ParseSemantic(v); err == nil {
			return p.String(), nil
		}
	}
	return "", fmt.Errorf("--version printed %q, not \"Kubernetes vX.Y.Z\"", line)
}
