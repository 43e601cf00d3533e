package kind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
)

// kind starts every node container with `docker run --privileged` and runs commands in it with
// `docker exec --privileged`. Some engines refuse --privileged: it asks for every capability, and
// an engine that itself lacks one (this project's machines have no CAP_SYS_RESOURCE in their
// bounding set) fails with "unable to apply caps: operation not permitted". A kind node needs
// what --privileged gives, not the flag itself, so on such an engine the docker commands kind
// runs are rewritten (Unprivileged): each --privileged becomes the explicit flags below. The kind
// library runs `docker` through $PATH and offers no hook for it (sigs.k8s.io/kind/pkg/exec's
// DefaultCmder is a concrete type), so the rewrite is a shim found first on $PATH: this very
// binary, under the name docker (RunDockerShim).

// unprivilegedRunFlags replace --privileged in `docker run`: every capability but
// CAP_SYS_RESOURCE, no seccomp/AppArmor confinement, no masked or read-only /proc and /sys paths,
// every device allowed in the node's devices cgroup (privileged pods, kube-proxy among them, ask
// for all devices, and a child cgroup gets no more than its parent), and the kernel log the
// kubelet's OOM watcher reads. The node image's entrypoint makes the
// (read-only) cgroup mounts writable and restricts containerd's oom_score_adj.
var unprivilegedRunFlags = []string{
	"--cap-add=ALL", "--cap-drop=SYS_RESOURCE",
	"--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
	"--security-opt", "systempaths=unconfined",
	"--device-cgroup-rule=a *:* rwm",
	"--device", "/dev/kmsg",
}

// Environment of the shim: the docker it runs, and that it is the shim.
const (
	envRealDocker = "CLUSTER_PROVIDER_REAL_DOCKER"
	shimName      = "docker"
)

// rewriteDockerArgs returns args (a docker command line without "docker") with --privileged
// replaced for an engine that refuses it: in `run`/`create`, by unprivilegedRunFlags; in `exec`,
// dropped (an exec gets the container's capabilities). Only flags before the image (run) or
// container (exec) are looked at; the command inside is never changed.
func rewriteDockerArgs(args []string) []string {
	if len(args) == 0 {
		return args
	}
	var replacement []string
	switch args[0] {
	case "run", "create":
		replacement = unprivilegedRunFlags
	case "exec":
	default:
		return args
	}
	out := make([]string, 0, len(args)+len(replacement))
	out = append(out, args[0])
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") { // the image or container: the rest is the command
			return append(out, args[i:]...)
		}
		switch a {
		case "--privileged", "--privileged=true":
			out = append(out, replacement...)
			continue
		}
		out = append(out, a)
		// A flag with its value in the next argument: keep the value as it is.
		if !strings.Contains(a, "=") && dockerFlagTakesValue(a) && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// dockerFlagTakesValue says whether a docker run/exec flag (without "=value") takes the next
// argument as its value. Boolean flags kind passes: --detach, --tty, --init=false,
// --privileged, -i, -t; the rest of the flags kind passes take values.
func dockerFlagTakesValue(flag string) bool {
	switch flag {
	case "-d", "--detach", "-t", "--tty", "-i", "--interactive", "--rm", "--init", "--privileged",
		"--read-only", "-P", "--publish-all", "--sig-proxy", "--oom-kill-disable", "--no-healthcheck":
		return false
	}
	return true
}

// IsDockerShim says whether this process was started as the docker shim: its name is docker and
// the real docker is named in its environment.
func IsDockerShim() bool {
	return filepath.Base(os.Args[0]) == shimName && os.Getenv(envRealDocker) != ""
}

// RunDockerShim replaces this process with the real docker, given args rewritten; it returns
// only on error, with an exit code.
func RunDockerShim(args []string) int {
	real := os.Getenv(envRealDocker)
	argv := append([]string{real}, rewriteDockerArgs(args)...)
	err := syscall.Exec(real, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "cluster-provider docker shim: running %s: %v\n", real, err)
	return 127
}

// shim is where this process put its docker shim, once it has.
var shim struct {
	sync.Mutex
	dir string
}

// Unprivileged makes every later `docker` this process (and its children) runs the shim: it
// links this executable as dir/docker and puts dir first on $PATH. Idempotent.
func Unprivileged(dir string) error {
	shim.Lock()
	defer shim.Unlock()
	if shim.dir != "" {
		return nil
	}
	real, err := exec.LookPath("docker")
	if err != nil {
		return fmt.Errorf("the kind backend needs the docker command: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	link := filepath.Join(dir, shimName)
	_ = os.Remove(link)
	if err := os.Symlink(self, link); err != nil {
		return fmt.Errorf("linking the docker shim: %w", err)
	}
	if err := os.Setenv(envRealDocker, real); err != nil {
		return err
	}
	if err := os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		return err
	}
	shim.dir = dir
	return nil
}

// errCapsRefused is how runc says the engine cannot grant the capabilities asked for.
const errCapsRefused = "unable to apply caps"

// probeImage is an empty image (docker import of an empty archive): the probe needs an image,
// and an engine without a registry may have none.
const probeImage = "cluster-provider/privileged-probe:empty"

// RefusesPrivileged asks the engine to start a container with --privileged and says whether it
// refused for want of capabilities. The container's command does not exist: an engine that grants
// the capabilities fails later, at the exec, and that counts as granted. A failing engine is an
// error.
func RefusesPrivileged(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := exec.CommandContext(ctx, "docker", "image", "inspect", probeImage).Run(); err != nil {
		imp := exec.CommandContext(ctx, "docker", "import", "-", probeImage)
		imp.Stdin = bytes.NewReader(make([]byte, 1024)) // an empty tar archive: two zero blocks
		if out, err := imp.CombinedOutput(); err != nil {
			return false, fmt.Errorf("docker import of an empty probe image: %v: %s", err, strings.TrimSpace(string(out)))
		}
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", "run", "--rm", "--privileged", "--entrypoint", "/probe", probeImage)
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return false, nil
	case errors.As(err, &exit) && strings.Contains(stderr.String(), errCapsRefused):
		return true, nil
	case errors.As(err, &exit) && exit.ExitCode() >= 125: // the engine or runtime failed: the exec did
		if strings.Contains(stderr.String(), "/probe") {
			return false, nil
		}
	}
	return false, fmt.Errorf("docker run --privileged (a probe of the engine): %v: %s", err, strings.TrimSpace(stderr.String()))
}

// engine remembers, per process, that the Docker engine has been probed.
var engine struct {
	sync.Mutex
	checked bool
}

// PrepareEngine probes once per process whether the engine refuses --privileged and, if it does,
// installs the docker shim in shimDir. Every kind operation needs it first: kind runs
// `docker exec --privileged` even to read a kubeconfig.
func PrepareEngine(ctx context.Context, shimDir string) error {
	engine.Lock()
	defer engine.Unlock()
	if engine.checked {
		return nil
	}
	refuses, err := RefusesPrivileged(ctx)
	if err != nil {
		return err
	}
	if refuses {
		if err := Unprivileged(shimDir); err != nil {
			return err
		}
	}
	engine.checked = true
	return nil
}

// engineProvider is a kind provider that prepares the engine (PrepareEngine) before each call.
type engineProvider struct {
	p       *kindcluster.Provider
	shimDir string
}

var _ Provider = engineProvider{}

// NewProvider returns the kind library's Docker provider, made to work on an engine that refuses
// --privileged: the shim goes to shimDir if needed.
func NewProvider(shimDir string) Provider {
	return engineProvider{p: kindcluster.NewProvider(kindcluster.ProviderWithDocker()), shimDir: shimDir}
}

func (e engineProvider) prepare() error { return PrepareEngine(context.Background(), e.shimDir) }

func (e engineProvider) Create(name string, options ...kindcluster.CreateOption) error {
	if err := e.prepare(); err != nil {
		return err
	}
	return e.p.Create(name, options...)
}

func (e engineProvider) Delete(name, explicitKubeconfigPath string) error {
	if err := e.prepare(); err != nil {
		return err
	}
	return e.p.Delete(name, explicitKubeconfigPath)
}

func (e engineProvider) List() ([]string, error) {
	if err := e.prepare(); err != nil {
		return nil, err
	}
	return e.p.List()
}

func (e engineProvider) KubeConfig(name string, internal bool) (string, error) {
	if err := e.prepare(); err != nil {
		return "", err
	}
	return e.p.KubeConfig(name, internal)
}

func (e engineProvider) ListNodes(name string) ([]nodes.Node, error) {
	if err := e.prepare(); err != nil {
		return nil, err
	}
	return e.p.ListNodes(name)
}
