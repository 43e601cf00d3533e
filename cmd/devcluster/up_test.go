package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const sampleConfigMap = `# a comment and an empty document first
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: devcluster-test
  namespace: default
data:
  kept: "yes"
`

// TestUpKeepsDataAcrossRestarts starts the control plane, applies an object, stops it, starts it
// again on the same folder and finds the object: etcd's data survives, the kubeconfig is new.
func TestUpKeepsDataAcrossRestarts(t *testing.T) {
	assets := envtestAssets(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "sample.yaml")
	require.NoError(t, os.WriteFile(file, []byte(sampleConfigMap), 0o600))

	kubeconfig, stop := startUp(t, upOptions{Dir: dir, Assets: assets})
	for range 2 { // applying twice is fine
		var out bytes.Buffer
		require.NoError(t, apply(t.Context(), kubeconfig, []string{file}, &out))
		assert.Equal(t, "configmap/devcluster-test serverside-applied\n", out.String())
	}
	stop()
	assert.NoFileExists(t, kubeconfig, "the kubeconfig is removed when the control plane stops")

	kubeconfig, stop = startUp(t, upOptions{Dir: dir, Assets: assets})
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	c, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	cm := &corev1.ConfigMap{}
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "devcluster-test"}, cm))
	assert.Equal(t, map[string]string{"kept": "yes"}, cm.Data)
}

func TestApplyErrors(t *testing.T) {
	dir := t.TempDir()
	noKind := filepath.Join(dir, "nokind.yaml")
	require.NoError(t, os.WriteFile(noKind, []byte("metadata: {name: x}\n"), 0o600))
	_, err := readObjects(noKind)
	require.ErrorContains(t, err, "without apiVersion or kind")

	_, err = readObjects(filepath.Join(dir, "missing.yaml"))
	require.Error(t, err)

	var stderr bytes.Buffer
	assert.Equal(t, 2, run(t.Context(), []string{"apply"}, &bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), "name at least one file")
	stderr.Reset()
	assert.Equal(t, 2, run(t.Context(), []string{"up", "--assets", dir}, &bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), "--dir is required")
}

// startUp runs up until the returned stop is called, and returns the kubeconfig once it is ready.
func startUp(t *testing.T, o upOptions) (kubeconfig string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- up(ctx, o, func(k string) { ready <- k }) }()
	select {
	case kubeconfig = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("up returned before the control plane was ready: %v", err)
	case <-time.After(2 * startTimeout):
		cancel()
		t.Fatal("the control plane did not start in time")
	}
	stopped := false
	return kubeconfig, func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, "stopping the control plane")
		case <-time.After(2 * stopTimeout):
			t.Fatal("the control plane did not stop in time")
		}
	}
}

// envtestAssets is KUBEBUILDER_ASSETS, or else the newest bin/k8s/* of the module (`make envtest`).
func envtestAssets(t *testing.T) string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	found, _ := filepath.Glob(filepath.Join("..", "..", "bin", "k8s", "*", "kube-apiserver"))
	if len(found) == 0 {
		t.Fatal("no envtest binaries: run `make envtest`, or set KUBEBUILDER_ASSETS")
	}
	sort.Strings(found)
	abs, err := filepath.Abs(filepath.Dir(found[len(found)-1]))
	require.NoError(t, err)
	return abs
}
