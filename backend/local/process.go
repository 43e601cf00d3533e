package local

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is one running child (etcd or kube-apiserver).
type process struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when it exited
	err  error         // Wait's result, set before done closes
}

// startProcess starts bin with args and extra environment entries, its output appended to
// logPath.
func startProcess(bin string, args, env []string, logPath string) (*process, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "==> %s starting %s\n", time.Now().UTC().Format(time.RFC3339), filepath.Base(bin))
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
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
