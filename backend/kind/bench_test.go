package kind

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkCreate makes one kind cluster per iteration from the node image KIND_NODE_IMAGE (make
// kind-image) with Create, as the kind backend does, and deletes it: create → Ready (every node
// Ready, so the API server serves and pods run) and delete, p50 and max over the iterations.
// Skipped without the image or a Docker engine. docs/benchmarks.md has the figures:
//
//	KIND_NODE_IMAGE=cluster-provider/kind-node:v1.37.1 go test ./backend/kind -run '^$' -bench Create -benchtime 3x
func BenchmarkCreate(b *testing.B) {
	image := os.Getenv("KIND_NODE_IMAGE")
	if image == "" {
		b.Skip("KIND_NODE_IMAGE is not set (make kind-image builds the node image)")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		b.Skipf("no Docker engine answers: %v", err)
	}
	p := NewProvider(filepath.Join(b.TempDir(), "bin"))
	var creates, deletes []float64
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("bench-%d-%d", os.Getpid(), i)
		kubeconfig := filepath.Join(b.TempDir(), "kubeconfig")
		start := time.Now()
		err := Create(context.Background(), p, name, CreateOptions{Image: image, KubeconfigPath: kubeconfig})
		creates = append(creates, time.Since(start).Seconds())
		start = time.Now()
		if derr := p.Delete(name, kubeconfig); derr != nil {
			b.Fatalf("deleting kind cluster %s: %v", name, derr)
		}
		deletes = append(deletes, time.Since(start).Seconds())
		if err != nil {
			b.Fatalf("creating kind cluster %s: %v", name, err)
		}
	}
	slices.Sort(creates)
	slices.Sort(deletes)
	b.ReportMetric(creates[len(creates)/2], "create-p50-s")
	b.ReportMetric(creates[len(creates)-1], "create-max-s")
	b.ReportMetric(deletes[len(deletes)/2], "delete-p50-s")
}
