package local

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/openmcp-local/cluster-provider/backend"
)

// Supervision timing.
const (
	minBackoff    = 500 * time.Millisecond
	maxBackoff    = 30 * time.Second
	stableAfter   = 30 * time.Second // a process that ran this long restarts with minBackoff again
	probeInterval = 100 * time.Millisecond
	probeTimeout  = 2 * time.Second
	// retryNotReady is the safety net the reconciler gets while a cluster is not Ready; the
	// Backend's notification normally comes first.
	retryNotReady = 5 * time.Second
)

// Process names, as in logs, messages and PIDs.
const (
	procEtcd      = "etcd"
	procAPIServer = "kube-apiserver"
)

// instance supervises the two processes of one cluster: etcd first, then kube-apiserver; each is
// restarted with backoff when it exits. A watcher probes readiness after every (re)start and
// notifies the Backend's Notify on every change of Ready.
type instance struct {
	b     *Backend
	dir   string
	bins  Binaries
	pki   *pki
	log   logr.Logger
	probe *http.Client // authenticates as the admin; verifies the cluster CA
	// authMu serializes writes of the authentication configuration file.
	authMu sync.Mutex

	mu       sync.Mutex
	meta     meta
	ready    bool
	reason   string
	message  string
	version  string
	restarts int
	epoch    int // counts crashes: a probe that started before one must not declare Ready
	pids     map[string]int

	cancel  context.CancelFunc
	killNow atomic.Bool   // stop with SIGKILL, not SIGTERM (the cluster is being deleted)
	done    chan struct{} // closed when both processes have stopped
	recheck chan struct{}
}

func newInstance(b *Backend, dir string, m meta, bins Binaries, p *pki) (*instance, error) {
	cfg := adminConfig(endpoint(b.opts.AdvertiseHost, m.Ports.APIServer), p)
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("the admin transport: %w", err)
	}
	return &instance{
		b: b, dir: dir, bins: bins, pki: p, meta: m,
		log:     b.log.WithValues("cluster", m.Namespace+"/"+m.Name, "uid", m.UID),
		probe:   &http.Client{Transport: transport, Timeout: probeTimeout},
		reason:  backend.ReasonStarting,
		message: "etcd and kube-apiserver " + bins.Version + " are starting.",
		pids:    map[string]int{},
		done:    make(chan struct{}),
		recheck: make(chan struct{}, 1),
	}, nil
}

func adminConfig(host string, p *pki) *rest.Config {
	return &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   p.CAPEM,
			CertData: p.AdminCertPEM,
			KeyData:  p.AdminKeyPEM,
		},
		QPS: -1,
	}
}

// start runs the processes until stop.
func (in *instance) start() {
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	go in.run(ctx)
}

// stop stops both processes (kill: at once, else gracefully, kube-apiserver first) and returns
// when they have exited.
func (in *instance) stop(kill bool) {
	if kill {
		in.killNow.Store(true)
	}
	in.cancel()
	<-in.done
}

func (in *instance) run(ctx context.Context) {
	defer close(in.done)
	etcdCtx, stopEtcd := context.WithCancel(context.Background())
	var etcdWG, apiWG sync.WaitGroup
	etcdWG.Go(func() { in.supervise(etcdCtx, procEtcd, in.startEtcd) })
	if in.waitEtcd(ctx) {
		apiWG.Go(func() { in.supervise(ctx, procAPIServer, in.startAPIServer) })
		apiWG.Go(func() { in.watchReady(ctx) })
	}
	<-ctx.Done()
	apiWG.Wait()
	stopEtcd()
	etcdWG.Wait()
}

// supervise keeps one process running until ctx ends, then stops it.
func (in *instance) supervise(ctx context.Context, name string, start func() (*process, error)) {
	backoff := minBackoff
	for ctx.Err() == nil {
		p, err := start()
		if err != nil {
			in.down(name, fmt.Sprintf("%s could not be started: %v; retrying in %s.", name, err, backoff), false)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		in.setPID(name, p.pid())
		in.trigger()
		started := time.Now()
		select {
		case <-ctx.Done():
			grace := in.b.opts.StopGrace
			if in.killNow.Load() {
				grace = 0
			}
			p.stop(grace)
			in.setPID(name, 0)
			return
		case <-p.done:
		}
		in.setPID(name, 0)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > stableAfter {
			backoff = minBackoff
		}
		in.log.Info("A process of the cluster exited; restarting it", "process", name, "exit", exitText(p.err), "backoff", backoff)
		in.down(name, fmt.Sprintf("%s exited (%s); restarting it in %s (logs in %s).",
			name, exitText(p.err), backoff, filepath.Join(in.dir, logDir)), true)
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func (in *instance) startEtcd() (*process, error) {
	in.mu.Lock()
	p := in.meta.Ports
	in.mu.Unlock()
	return startProcess(in.bins.Etcd(), etcdArgs(in.dir, p), in.b.opts.Tuning.env(in.b.opts.Tuning.EtcdGOMEMLIMIT),
		filepath.Join(in.dir, logDir, etcdLogFile))
}

// startAPIServer starts kube-apiserver. If its port was taken in the meantime by another
// process, it gets a new one first (the endpoint in the status follows).
func (in *instance) startAPIServer() (*process, error) {
	if err := in.b.reassignAPIServerPort(in); err != nil {
		return nil, err
	}
	in.mu.Lock()
	p := in.meta.Ports
	in.mu.Unlock()
	return startProcess(in.bins.APIServer(), apiServerArgs(in.dir, in.b.opts.AdvertiseHost, p, *in.b.opts.Tuning),
		in.b.opts.Tuning.env(in.b.opts.Tuning.APIServerGOMEMLIMIT), filepath.Join(in.dir, logDir, apiLogFile))
}

// waitEtcd waits until etcd answers its health check, or ctx ends.
func (in *instance) waitEtcd(ctx context.Context) bool {
	for {
		if in.etcdHealthy(ctx) == nil {
			return true
		}
		if !sleep(ctx, probeInterval/2) {
			return false
		}
	}
}

func (in *instance) etcdHealthy(ctx context.Context) error {
	in.mu.Lock()
	url := "http://127.0.0.1:" + strconv.Itoa(in.meta.Ports.Etcd) + "/health"
	in.mu.Unlock()
	body, err := get(ctx, http.DefaultClient, url)
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
		return fmt.Errorf("etcd is not healthy: %s", body)
	}
	return nil
}

// watchReady probes, after every (re)start of a process, until the cluster serves: etcd healthy,
// kube-apiserver /readyz ok. Then it reads /version and declares the cluster Ready.
func (in *instance) watchReady(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-in.recheck:
		}
		for {
			in.mu.Lock()
			epoch, url := in.epoch, endpoint(in.b.opts.AdvertiseHost, in.meta.Ports.APIServer)
			in.mu.Unlock()
			if v, err := in.serving(ctx, url); err == nil {
				in.up(epoch, v)
				break
			}
			if !sleep(ctx, probeInterval) {
				return
			}
		}
	}
}

func (in *instance) serving(ctx context.Context, url string) (string, error) {
	if err := in.etcdHealthy(ctx); err != nil {
		return "", err
	}
	if _, err := get(ctx, in.probe, url+"/readyz"); err != nil {
		return "", err
	}
	body, err := get(ctx, in.probe, url+"/version")
	if err != nil {
		return "", err
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", err
	}
	return backend.Normalize(v.GitVersion), nil
}

func get(ctx context.Context, c *http.Client, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, nil
}

func (in *instance) trigger() {
	select {
	case in.recheck <- struct{}{}:
	default:
	}
}

// up declares the cluster Ready, unless a process crashed since the probe began.
func (in *instance) up(epoch int, version string) {
	in.mu.Lock()
	if in.epoch != epoch {
		in.mu.Unlock()
		in.trigger()
		return
	}
	changed := !in.ready || in.version != version
	in.ready, in.version = true, version
	in.reason, in.message = backend.ReasonRunning, fmt.Sprintf("kube-apiserver %s serves on %s.", version,
		endpoint(in.b.opts.AdvertiseHost, in.meta.Ports.APIServer))
	in.mu.Unlock()
	if changed {
		in.log.Info("The cluster is ready", "version", version)
		in.b.notify(in)
	}
}

// down records that the cluster does not serve: a process failed to start, or exited (crashed,
// counted as a restart).
func (in *instance) down(name, message string, crashed bool) {
	in.mu.Lock()
	in.ready = false
	in.epoch++
	in.reason, in.message = backend.ReasonRestarting, message
	if crashed {
		in.restarts++
	}
	in.mu.Unlock()
	in.b.notify(in)
}

func (in *instance) setPID(name string, pid int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if pid == 0 {
		delete(in.pids, name)
	} else {
		in.pids[name] = pid
	}
}

// providerStatus is status.providerStatus of a local cluster.
type providerStatus struct {
	Backend  string `json:"backend"`
	Version  string `json:"version"`
	Ports    ports  `json:"ports"`
	Restarts int    `json:"restarts"`
}

func (in *instance) state() backend.State {
	in.mu.Lock()
	defer in.mu.Unlock()
	url := endpoint(in.b.opts.AdvertiseHost, in.meta.Ports.APIServer)
	version := in.version
	if version == "" {
		version = in.bins.Version
	}
	s := backend.State{
		Ready:     in.ready,
		Reason:    in.reason,
		Message:   in.message,
		Endpoint:  url,
		Endpoints: map[string]string{backend.EndpointAPIServerExternal: url},
		CABundle:  in.pki.CAPEM,
		Version:   in.version,
		Info:      fmt.Sprintf("%s v%s :%d", Name, version, in.meta.Ports.APIServer),
		ProviderStatus: providerStatus{
			Backend: Name, Version: "v" + version, Ports: in.meta.Ports, Restarts: in.restarts,
		},
		Restarts: in.restarts,
	}
	if !in.ready {
		s.RetryAfter = retryNotReady
	}
	return s
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
