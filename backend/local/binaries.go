package local

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/openmcp-local/cluster-provider/backend"
)

// Binaries is one --local-binaries folder: a kube-apiserver, a kube-controller-manager of the same
// version and an etcd.
type Binaries struct {
	// Dir is the folder.
	Dir string
	// Version is the Kubernetes version its kube-apiserver reports, without "v" (1.37.1).
	Version string
	// EtcdVersion is the version its etcd reports (3.6.6); empty if `etcd --version` names none.
	EtcdVersion string
}

// EtcdLine is the minor of the folder's etcd (6 for 3.6.6): the version it reports or, when it
// reports none, the line its Kubernetes version ships with.
func (b Binaries) EtcdLine() int {
	if v, err := version.ParseSemantic(b.EtcdVersion); err == nil {
		return int(v.Minor())
	}
	line, _ := backend.EtcdLine(b.Version)
	return line
}

// APIServer is the path of the folder's kube-apiserver.
func (b Binaries) APIServer() string { return filepath.Join(b.Dir, "kube-apiserver") }

// ControllerManager is the path of the folder's kube-controller-manager.
func (b Binaries) ControllerManager() string { return filepath.Join(b.Dir, "kube-controller-manager") }

// Etcd is the path of the folder's etcd.
func (b Binaries) Etcd() string { return filepath.Join(b.Dir, "etcd") }

// Etcdctl is the path of the folder's etcdctl, which takes snapshots (optional: backup.go).
func (b Binaries) Etcdctl() string { return filepath.Join(b.Dir, "etcdctl") }

// Etcdutl is the path of the folder's etcdutl, which checks and restores snapshots (optional).
func (b Binaries) Etcdutl() string { return filepath.Join(b.Dir, "etcdutl") }

// backupTools checks that the folder holds etcdctl and etcdutl: without them its clusters take
// no snapshots.
func (b Binaries) backupTools() error {
	for _, bin := range []string{b.Etcdctl(), b.Etcdutl()} {
		if err := executable(bin); err != nil {
			return backend.Errorf(backend.ReasonBackupUnavailable,
				"the --local-binaries folder %s of Kubernetes %s has no etcdctl and etcdutl (%v), which take, check and restore snapshots: add those of its etcd %s (`make envtest` builds them)",
				b.Dir, b.Version, err, b.EtcdVersion)
		}
	}
	return nil
}

// LoadBinaries inspects each folder once: it must hold executable kube-apiserver,
// kube-controller-manager and etcd files; the Kubernetes version it offers is what
// `kube-apiserver --version` prints (folder names mean nothing), and kube-controller-manager must
// print the same; its etcd must start with the flags a cluster's etcd gets (checkEtcdStarts), so
// a version is never offered whose clusters cannot start. Two folders of the same version are an
// error. The error names the folder, the
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
		etcdOut, err := backend.RunVersion(ctx, b.Etcd())
		if err != nil {
			return nil, fmt.Errorf("--local-binaries folder %s: etcd --version: %w", dir, err)
		}
		b.EtcdVersion = parseEtcdVersion(etcdOut)
		if err := checkEtcdStarts(ctx, b.Etcd()); err != nil {
			return nil, fmt.Errorf("--local-binaries folder %s: %w", dir, err)
		}
		out1, err := backend.RunVersion(ctx, b.APIServer())
		if err != nil {
			return nil, fmt.Errorf("--local-binaries folder %s: kube-apiserver --version: %w", dir, err)
		}
		b.Version, err = parseKubernetesVersion(out1)
		if err != nil {
			return nil, fmt.Errorf("--local-binaries folder %s: kube-apiserver %w", dir, err)
		}
		out2, err := backend.RunVersion(ctx, b.ControllerManager())
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

// parseKubernetesVersion reads the version from `kube-apiserver --version` (or
// kube-controller-manager) output, which is "Kubernetes v1.37.1".
func parseKubernetesVersion(out string) (string, error) { return backend.ParseKubernetesVersion(out) }

// parseEtcdVersion reads the version from `etcd --version` output ("etcd Version: 3.6.6"), or "".
func parseEtcdVersion(out string) string { return backend.ParseEtcdVersion(out) }

// etcdStartTimeout bounds the start check of a folder's etcd (it is healthy within a second).
const etcdStartTimeout = 30 * time.Second

// checkEtcdStarts starts etcdBin with the flags of a cluster's etcd (etcdArgs) in a throw-away
// 0700 folder, waits until it reports healthy on its client socket, and stops it. An etcd that
// refuses the flags (as etcd 3.6 refused unix URLs that were not "host:port") exits at once: the
// error then quotes its last output line.
func checkEtcdStarts(ctx context.Context, etcdBin string) error {
	dir, err := os.MkdirTemp("", "etcd-check-")
	if err != nil {
		return fmt.Errorf("a folder to try etcd in: %w", err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, etcdStartTimeout)
	defer cancel()

	var out bytes.Buffer
	cmd := exec.Command(etcdBin, etcdArgs(dir, DefaultEtcdQuota)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &out, &out // one writer: exec writes from one goroutine
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", etcdBin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}

	client := etcdClient(filepath.Join(dir, etcdSocket))
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("%s cannot run a cluster's etcd: it exited (%v): %s", etcdBin, err, lastLine(out.String()))
		case <-ctx.Done():
			stop()
			return fmt.Errorf("%s did not report healthy within %s with a cluster's flags; its last output: %s", etcdBin, etcdStartTimeout, lastLine(out.String()))
		case <-tick.C:
			if etcdHealthy(ctx, client) == nil {
				stop()
				return nil
			}
		}
	}
}

// lastLine is the last non-blank line of out, at most 300 bytes of it; of a JSON log line (etcd
// logs JSON), its message and error.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	line := strings.TrimSpace(lines[len(lines)-1])
	var entry struct{ Msg, Error string }
	if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg != "" {
		line = entry.Msg
		if entry.Error != "" {
			line += ": " + entry.Error
		}
	}
	if len(line) > 300 {
		line = line[:300] + "..."
	}
	return line
}
