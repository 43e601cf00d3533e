package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The layout of the --dir folder.
const (
	etcdDir        = "etcd"       // etcd's data, kept across restarts
	certDir        = "apiserver"  // the API server's certificates, new at every start
	logDir         = "logs"       // etcd.log and kube-apiserver.log of the last start
	kubeconfigFile = "kubeconfig" // administrator kubeconfig, present while the control plane runs
)

// Start and stop timeouts of each process. A cold kube-apiserver on a busy machine is slower than
// envtest's 20s default.
const (
	startTimeout = 90 * time.Second
	stopTimeout  = 30 * time.Second
)

// upOptions configure up.
type upOptions struct {
	// Dir holds the control plane's state (see the layout constants). Required.
	Dir string
	// Assets is the folder with the etcd and kube-apiserver binaries. Required.
	Assets string
}

// up runs etcd and kube-apiserver until ctx is done. Once the API server answers it writes the
// administrator kubeconfig and calls ready with its path; before returning it stops both processes
// and removes the kubeconfig.
func up(ctx context.Context, o upOptions, ready func(kubeconfig string)) (retErr error) {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, kubeconfigFile)
	if err := os.Remove(kubeconfig); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// envtest publishes the serving CA only when it generates the serving certificate itself, so
	// the certificates cannot be reused: they are made anew, and so is the kubeconfig.
	if err := os.RemoveAll(filepath.Join(dir, certDir)); err != nil {
		return err
	}
	for _, d := range []string{etcdDir, certDir, logDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return err
		}
	}
	etcdLog, err := os.Create(filepath.Join(dir, logDir, "etcd.log"))
	if err != nil {
		return err
	}
	defer etcdLog.Close()
	apiLog, err := os.Create(filepath.Join(dir, logDir, "kube-apiserver.log"))
	if err != nil {
		return err
	}
	defer apiLog.Close()

	etcd := &envtest.Etcd{DataDir: filepath.Join(dir, etcdDir), Out: etcdLog, Err: etcdLog}
	// envtest turns fsync off for speed; this data is meant to last.
	etcd.Configure().Disable("unsafe-no-fsync")
	env := &envtest.Environment{
		BinaryAssetsDirectory: o.Assets,
		ControlPlane: envtest.ControlPlane{
			Etcd:      etcd,
			APIServer: &envtest.APIServer{CertDir: filepath.Join(dir, certDir), Out: apiLog, Err: apiLog},
		},
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	defer func() {
		if err := env.Stop(); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("stopping the control plane: %w", err))
		}
	}()
	if _, err := env.Start(); err != nil {
		return fmt.Errorf("starting the control plane from %s (logs in %s): %w", o.Assets, filepath.Join(dir, logDir), err)
	}

	defer os.Remove(kubeconfig)
	if err := writeFileAtomic(kubeconfig, env.KubeConfig); err != nil {
		return err
	}
	ready(kubeconfig)
	<-ctx.Done()
	return nil
}

// writeFileAtomic writes data to path through a temporary file and a rename, so that a reader
// waiting for path never sees it half written.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
