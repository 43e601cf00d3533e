// Command kindcluster makes, loads and deletes the kind cluster that `make e2e-kind` uses as the
// platform, with backend/kind: the same offline node image (make kind-image), networking and
// docker shim as the operator's kind backend, so it works where the kind CLI cannot (no registry
// for kindnetd, an engine that refuses --privileged).
//
//	go run ./hack/kindcluster create --name NAME --image NODE-IMAGE --kubeconfig FILE [--workers N]
//	go run ./hack/kindcluster load   --name NAME IMAGE...
//	go run ./hack/kindcluster delete --name NAME --kubeconfig FILE
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"

	"github.com/openmcp-local/cluster-provider/backend/kind"
)

func main() {
	if kind.IsDockerShim() {
		os.Exit(kind.RunDockerShim(os.Args[1:]))
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kindcluster:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: kindcluster create|load|delete --name NAME [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	name := fs.String("name", "", "the kind cluster")
	image := fs.String("image", "", "create: the node image")
	kubeconfig := fs.String("kubeconfig", "", "create, delete: the kubeconfig file kind writes")
	timeout := fs.Duration("timeout", 5*time.Minute, "create: how long the nodes may take to be Ready")
	workers := fs.Int("workers", 0, "create: worker nodes besides the control-plane node")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *name == "" {
		return errors.New("--name is required")
	}
	shimDir, err := os.MkdirTemp("", "kindcluster-shim-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(shimDir)
	p := kind.NewProvider(shimDir)
	ctx := context.Background()

	switch args[0] {
	case "create":
		if *image == "" || *kubeconfig == "" {
			return errors.New("create needs --image and --kubeconfig")
		}
		names, err := p.List()
		if err != nil {
			return err
		}
		if slices.Contains(names, *name) {
			fmt.Fprintf(os.Stderr, "kind cluster %s exists; writing its kubeconfig to %s\n", *name, *kubeconfig)
			cfg, err := p.KubeConfig(*name, false)
			if err != nil {
				return err
			}
			return os.WriteFile(*kubeconfig, []byte(cfg), 0o600)
		}
		cfg := &v1alpha4.Cluster{TypeMeta: v1alpha4.TypeMeta{APIVersion: "kind.x-k8s.io/v1alpha4", Kind: "Cluster"},
			Nodes: []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole}}}
		for range *workers {
			cfg.Nodes = append(cfg.Nodes, v1alpha4.Node{Role: v1alpha4.WorkerRole})
		}
		start := time.Now()
		if err := kind.Create(ctx, p, *name, kind.CreateOptions{Image: *image, Config: cfg, KubeconfigPath: *kubeconfig, Timeout: *timeout}); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "kind cluster %s is Ready after %s\n", *name, time.Since(start).Round(100*time.Millisecond))
		return nil
	case "load":
		return load(p, *name, fs.Args(), shimDir)
	case "delete":
		return p.Delete(*name, *kubeconfig)
	default:
		return fmt.Errorf("unknown command %q: want create, load or delete", args[0])
	}
}

// load puts images of the local Docker engine into every node's containerd, as `kind load
// docker-image` does.
func load(p kind.Provider, name string, images []string, dir string) error {
	if len(images) == 0 {
		return errors.New("load needs the images to load")
	}
	archive := filepath.Join(dir, "images.tar")
	if out, err := exec.Command("docker", append([]string{"save", "-o", archive}, images...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("docker save: %v: %s", err, out)
	}
	nodes, err := p.ListNodes(name)
	if err != nil {
		return err
	}
	if len(nodes) == 0 {
		return fmt.Errorf("kind cluster %s has no nodes", name)
	}
	for _, n := range nodes {
		f, err := os.Open(archive)
		if err != nil {
			return err
		}
		err = nodeutils.LoadImageArchive(n, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("loading into node %s: %w", n, err)
		}
		// Pinned, the kubelet's image garbage collection never removes them: without a registry
		// nothing could pull them back.
		for _, image := range images {
			if out, err := exec.Command("docker", "exec", n.String(), "ctr", "-n", "k8s.io", "images", "label",
				containerdRef(image), "io.cri-containerd.pinned=pinned").CombinedOutput(); err != nil {
				return fmt.Errorf("pinning %s on node %s: %v: %s", image, n, err, out)
			}
		}
	}
	return nil
}

// containerdRef is the name containerd keeps a Docker image under: with the registry and, for
// an image without a path, library/ (cluster-provider:dev is docker.io/library/cluster-provider:dev).
func containerdRef(image string) string {
	first, _, hasSlash := strings.Cut(image, "/")
	switch {
	case !hasSlash:
		return "docker.io/library/" + image
	case strings.ContainsAny(first, ".:") || first == "localhost":
		return image
	default:
		return "docker.io/" + image
	}
}
