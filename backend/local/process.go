package local

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// process is one running child (etcd, kube-apiserver or kube-controller-manager).
type process struct {
	cmd  *exec.Cmd
	log  *cappedLog
	done chan struct{} // closed when it exited
	err  error         // Wait's result, set before done closes
}

// startProcess starts bin with args and extra environment entries in the working directory
// workDir, its output appended to logPath, which is capped at maxLogBytes (then rotated to
// logPath.1).
func startProcess(bin string, args, env []string, workDir, logPath string) (*process, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return nil, err
	}
	log, err := openCappedLog(logPath, maxLogBytes)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "==> %s starting %s\n", time.Now().UTC().Format(time.RFC3339), filepath.Base(bin))
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = workDir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &process{cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = log.Close()
		close(p.done)
	}()
	return p, nil
}

// stop ends the process: SIGTERM and up to grace to exit, then SIGKILL. A zero grace kills at
// once. It returns when the process has exited.
func (p *process) stop(grace time.Duration) {
	sig := syscall.SIGKILL
	if grace > 0 {
		sig = syscall.SIGTERM
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = p.cmd.Process.Kill()
	}
	if grace > 0 {
		select {
		case <-p.done:
			return
		case <-time.After(grace):
			_ = p.cmd.Process.Kill()
		}
	}
	<-p.done
}

// pid is the process's ID.
func (p *process) pid() int { return p.cmd.Process.Pid }

// writeKubeconfig writes a kubeconfig (0600) that reaches server, verified by caPEM, as the client
// certificate certPEM with keyPEM.
func writeKubeconfig(path, server string, caPEM, certPEM, keyPEM []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["local"] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "local"}
	cfg.CurrentContext = "local"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
}
