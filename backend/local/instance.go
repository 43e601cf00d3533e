package local

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
)

// Supervision timing.
const (
	minBackoff    = 500 * time.Millisecond
	maxBackoff    = 30 * time.Second
	stableAfter   = 30 * time.Second // a process that ran this long restarts with minBackoff again
	probeInterval = 100 * time.Millisecond
	probeTimeout  = 2 * time.Second
	// healthFailures is how many health checks in a row a running controller manager may miss
	// before it is restarted (as a liveness probe would).
	healthFailures = 3
	// servingHealthFailures is the same for the API server and etcd: twice as many, so that a
	// server slow under load (a 2 s probe timeout, every HealthInterval) is not restarted, which
	// would cut off every client; a hung one is restarted within a minute by default.
	servingHealthFailures = 6
	// retryNotReady is the safety net the reconciler gets while a cluster is not Ready; the
	// Backend's notification normally comes first.
	retryNotReady = 5 * time.Second
)

// Process names, as in logs, messages and PIDs.
const (
	procEtcd              = "etcd"
	procAPIServer         = "kube-apiserver"
	procControllerManager = "kube-controller-manager"
)

// kcmReadyCheck is the health check the controller manager adds once it has built its controllers
// (its /healthz lists it from then on): the sign that it runs them, not only that it started.
const kcmReadyCheck = "clusterrole-aggregation-controller"

// instance supervises the three processes of one cluster: etcd first, then kube-apiserver, and
// kube-controller-manager once the API server answers; each is restarted with backoff when it
// exits. A watcher probes readiness after every (re)start and notifies the Backend's Notify on
// every change: the API server's readiness (etcd and kube-apiserver) and the controller manager's
// are tracked apart, so the Cluster's conditions say which part is missing.
type instance struct {
	b     *Backend
	dir   string
	bins  Binaries
	pki   *pki
	log   logr.Logger
	probe *http.Client // authenticates as the admin; verifies the cluster CA
	etcd  *http.Client // reaches etcd's client socket
	// etcdMaint reaches it too, without the probes' timeout: a defragmentation takes its time.
	etcdMaint *http.Client
	// authMu serializes writes of the authentication configuration file.
	authMu sync.Mutex

	mu       sync.Mutex
	meta     meta
	api, kcm part
	version  string
	restarts int
	// etcdPart is what keepEtcdHealthy last reported: nil while etcd is fine. defragged is when
	// etcd was last defragmented.
	etcdPart  *backend.Part
	defragged time.Time
	freedAt   int64 // the revision at which a full etcd was last compacted and defragmented
	pids      map[string]int
	procs     map[string]*process
	// enc is the cluster's encryption keys (encryption.go), rotate the rotation its Cluster asks
	// for, encErr why the last rotation or rewrite failed.
	enc    encryption.State
	rotate string
	encErr string

	cancel  context.CancelFunc
	killNow atomic.Bool // stop with SIGKILL, not SIGTERM (the cluster is being deleted)
	// hung holds, by process name, the processes stopped for missing their health checks, so
	// that their exits say why. Guarded by mu.
	hung    map[string]bool
	done    chan struct{} // closed when every process has stopped
	recheck chan struct{}
}

// part is the readiness of the API server (with its etcd) or of the controller manager.
type part struct {
	backend.Part
	// epoch counts crashes: a probe that started before one must not declare the part Ready.
	epoch int
}

func newInstance(b *Backend, dir string, m meta, bins Binaries, p *pki) (*instance, error) {
	etcd := etcdClient(filepath.Join(dir, etcdSocket))
	starting := backend.Part{Reason: backend.ReasonStarting}
	in := &instance{
		b: b, dir: dir, bins: bins, pki: p, meta: m,
		log:       b.log.WithValues("cluster", m.Namespace+"/"+m.Name, "uid", m.UID),
		etcd:      etcd,
		etcdMaint: &http.Client{Transport: etcd.Transport},
		api:       part{Part: starting},
		kcm:       part{Part: starting},
		pids:      map[string]int{},
		procs:     map[string]*process{},
		done:      make(chan struct{}),
		recheck:   make(chan struct{}, 1),
	}
	// The probe presents the admin certificate of the moment: a renewal (renewIfDue) needs no
	// new client.
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(p.CAPEM) {
		return nil, errors.New("the cluster CA does not read")
	}
	in.probe = &http.Client{Timeout: probeTimeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				in.mu.Lock()
				certPEM, keyPEM := in.pki.AdminCertPEM, in.pki.AdminKeyPEM
				in.mu.Unlock()
				pair, err := tls.X509KeyPair(certPEM, keyPEM)
				return &pair, err
			}},
		IdleConnTimeout: 90 * time.Second,
	}}
	in.api.Message = "etcd and kube-apiserver " + bins.Version + " are starting."
	in.kcm.Message = "kube-controller-manager " + bins.Version + " starts once the API server answers."
	return in, nil
}

// adminConfig is the admin's config of in's API server.
func (in *instance) adminConfig() *rest.Config {
	in.mu.Lock()
	defer in.mu.Unlock()
	return adminConfig(endpoint(in.b.opts.AdvertiseHost, in.meta.Ports.APIServer), in.pki)
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
	in.recordCertificates()
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
	var etcdWG, wg sync.WaitGroup
	etcdWG.Go(func() { in.supervise(etcdCtx, procEtcd, in.startEtcd) })
	if in.waitEtcd(ctx) {
		wg.Go(func() { in.supervise(ctx, procAPIServer, in.startAPIServer) })
		wg.Go(func() { in.supervise(ctx, procControllerManager, in.startControllerManager) })
		wg.Go(func() { in.watchReady(ctx) })
	}
	<-ctx.Done()
	wg.Wait()
	stopEtcd()
	etcdWG.Wait()
}

// supervise keeps one process running until ctx ends, then stops it. start returns a nil process
// when ctx ended before it could start one.
func (in *instance) supervise(ctx context.Context, name string, start func(context.Context) (*process, error)) {
	backoff := minBackoff
	for ctx.Err() == nil {
		p, err := start(ctx)
		if p == nil && err == nil {
			return
		}
		if err != nil {
			in.down(name, fmt.Sprintf("%s could not be started: %v; retrying in %s.", name, err, backoff), false)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		in.setProcess(name, p)
		in.trigger()
		started := time.Now()
		select {
		case <-ctx.Done():
			grace := in.b.opts.StopGrace
			if in.killNow.Load() {
				grace = 0
			}
			p.stop(grace)
			in.setProcess(name, nil)
			return
		case <-p.done:
		}
		in.setProcess(name, nil)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > stableAfter {
			backoff = minBackoff
		}
		why := fmt.Sprintf("exited (%s)", exitText(p.err))
		if in.takeHung(name) {
			why = fmt.Sprintf("missed %d health checks in a row and was stopped", failuresAllowed(name))
		}
		in.log.Info("A process of the cluster exited; restarting it", "process", name, "why", why, "backoff", backoff)
		in.down(name, fmt.Sprintf("%s %s; restarting it in %s (logs in %s).",
			name, why, backoff, filepath.Join(in.dir, logDir)), true)
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

func (in *instance) startEtcd(context.Context) (*process, error) {
	t := in.b.opts.Tuning
	return startProcess(in.bins.Etcd(), etcdArgs(in.dir, t.etcdQuota()), t.env(t.EtcdGOMEMLIMIT), in.dir, filepath.Join(in.dir, logDir, etcdLogFile))
}

// startAPIServer starts kube-apiserver. If its port was taken in the meantime by another
// process, it gets a new one first (the endpoint in the status follows).
func (in *instance) startAPIServer(context.Context) (*process, error) {
	if err := in.b.reassignAPIServerPort(in); err != nil {
		return nil, err
	}
	in.mu.Lock()
	p, audit := in.meta.Ports, !in.meta.NoAudit
	in.mu.Unlock()
	t := in.b.opts.Tuning
	return startProcess(in.bins.APIServer(), apiServerArgs(in.dir, in.b.opts.AdvertiseHost, in.meta.serviceCIDR(), p, *t, audit),
		t.env(t.APIServerGOMEMLIMIT), in.dir, filepath.Join(in.dir, logDir, apiLogFile))
}

// startControllerManager starts kube-controller-manager once the API server answers /healthz: it
// gives up (and exits) when the API server does not answer within 10 s, which a cold start under
// load can take. Its kubeconfig is written anew each time, so it follows the API server's port.
func (in *instance) startControllerManager(ctx context.Context) (*process, error) {
	for {
		in.mu.Lock()
		url := endpoint(in.b.opts.AdvertiseHost, in.meta.Ports.APIServer)
		in.mu.Unlock()
		if _, err := get(ctx, in.probe, url+"/healthz"); err == nil {
			break
		}
		if !sleep(ctx, probeInterval) {
			return nil, nil
		}
	}
	in.mu.Lock()
	p := in.meta.Ports
	in.mu.Unlock()
	in.mu.Lock()
	ca, cert, key := in.pki.CAPEM, in.pki.KCMCertPEM, in.pki.KCMKeyPEM
	in.mu.Unlock()
	if err := writeKubeconfig(filepath.Join(in.dir, kcmKubeconfig), endpoint(in.b.opts.AdvertiseHost, p.APIServer), ca, cert, key); err != nil {
		return nil, fmt.Errorf("writing its kubeconfig: %w", err)
	}
	t := in.b.opts.Tuning
	return startProcess(in.bins.ControllerManager(), controllerManagerArgs(in.dir, in.meta.serviceCIDR(), p, *t),
		t.env(t.ControllerManagerGOMEMLIMIT), in.dir, filepath.Join(in.dir, logDir, kcmLogFile))
}

// renewIfDue issues the cluster's leaf certificates anew once the first is due (the lifetime's
// RenewBefore its end), from the same CA, while the cluster runs: kube-apiserver reloads its
// serving certificate by itself (it watches the files), the operator's probe and AdminConfig use
// the new admin certificate from then on, and the controller manager is restarted to read its new
// client and serving certificates (the API server keeps serving). Issued kubeconfigs stay valid:
// the CA does not change. A failure is logged and tried again at the next health check.
func (in *instance) renewIfDue() {
	in.mu.Lock()
	due := !time.Now().Before(in.pki.RenewAt)
	m := in.meta
	in.mu.Unlock()
	if !due {
		return
	}
	p, err := in.b.loadPKI(in.dir, m)
	if err != nil {
		in.log.Error(err, "Renewing the cluster's certificates failed; trying again at the next health check")
		return
	}
	in.mu.Lock()
	in.pki = p
	in.mu.Unlock()
	in.recordCertificates()
	in.log.Info("Renewed the cluster's certificates", "nextRenewal", p.RenewAt.UTC().Format(time.RFC3339))
	in.restart(procControllerManager)
}

// recordCertificates sets the expiry gauges of the cluster's certificates.
func (in *instance) recordCertificates() {
	in.mu.Lock()
	ref := backend.Ref{NamespacedName: types.NamespacedName{Namespace: in.meta.Namespace, Name: in.meta.Name}, Profile: in.meta.Profile}
	notAfter := maps.Clone(in.pki.NotAfter)
	in.mu.Unlock()
	backend.RecordCertificates(ref, notAfter)
}

// restartControllerManager stops the running controller manager; its supervisor starts it again
// (with a kubeconfig for the API server's new port).
// failuresAllowed is how many health checks in a row the process name may miss.
func failuresAllowed(name string) int {
	if name == procControllerManager {
		return healthFailures
	}
	return servingHealthFailures
}

// restartHung stops the process name, which missed its health checks: its supervisor restarts it
// and says why (takeHung). A hung process ignores SIGTERM; it gets SIGKILL after the grace.
func (in *instance) restartHung(name string) {
	in.mu.Lock()
	if in.procs[name] != nil {
		if in.hung == nil {
			in.hung = map[string]bool{}
		}
		in.hung[name] = true
	}
	in.mu.Unlock()
	in.restart(name)
}

// restart stops the process name; its supervisor starts it again.
func (in *instance) restart(name string) {
	in.mu.Lock()
	p := in.procs[name]
	in.mu.Unlock()
	if p != nil {
		go p.stop(in.b.opts.StopGrace)
	}
}

// takeHung reports whether the process name was stopped for missing its health checks, and
// forgets it.
func (in *instance) takeHung(name string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	hung := in.hung[name]
	delete(in.hung, name)
	return hung
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

func (in *instance) etcdHealthy(ctx context.Context) error { return etcdHealthy(ctx, in.etcd) }

// etcdClient reaches an etcd's HTTP endpoints (/health) over its client socket.
func etcdClient(socket string) *http.Client {
	return &http.Client{Timeout: probeTimeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}
}

// etcdHealthy asks etcd's /health whether it serves. A NOSPACE alarm does not count: a full etcd
// serves reads and deletes (keepEtcdHealthy reports and clears it).
func etcdHealthy(ctx context.Context, c *http.Client) error {
	body, err := get(ctx, c, "http://etcd/health?exclude=NOSPACE")
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

// watchReady probes, after every (re)start of a process, until the cluster is complete: the API
// server serves (etcd healthy, /readyz ok, /version read) and the controller manager runs its
// controllers. Each part is declared Ready as soon as it is.
func (in *instance) watchReady(ctx context.Context) {
	tick := time.NewTicker(in.b.opts.HealthInterval)
	defer tick.Stop()
	missed := map[string]int{} // health checks missed in a row, by process
	alive := map[string]func(context.Context) bool{
		procControllerManager: in.controllerManagerAlive,
		procAPIServer:         in.apiServerAlive,
		procEtcd:              in.etcdAlive,
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-in.recheck:
		case <-tick.C:
			in.renewIfDue()
			// A Ready part whose process is alive but answers nothing (hung, or SIGSTOPped) is
			// restarted after healthFailures missed checks in a row, as a liveness probe would.
			for name, check := range alive {
				if check(ctx) {
					missed[name] = 0
					continue
				}
				if missed[name]++; missed[name] >= failuresAllowed(name) {
					missed[name] = 0
					in.log.Info("A process of the cluster missed its health checks; restarting it", "process", name, "missed", failuresAllowed(name))
					in.restartHung(name)
				}
			}
			// After the liveness checks: a defragmentation or a rewrite may take a while.
			in.checkEtcd(ctx)
			in.keepEncrypted(ctx)
			continue
		}
		for {
			in.mu.Lock()
			apiEpoch, kcmEpoch := in.api.epoch, in.kcm.epoch
			apiReady, kcmReady := in.api.Ready, in.kcm.Ready
			url := endpoint(in.b.opts.AdvertiseHost, in.meta.Ports.APIServer)
			kcmURL := "https://127.0.0.1:" + strconv.Itoa(in.meta.Ports.ControllerManager)
			in.mu.Unlock()
			if !apiReady {
				if v, err := in.serving(ctx, url); err == nil {
					in.apiUp(apiEpoch, v)
					apiReady = true
				}
			}
			if !kcmReady && in.controllerManagerRuns(ctx, kcmURL, url) == nil {
				in.kcmUp(kcmEpoch)
				kcmReady = true
			}
			if apiReady && kcmReady {
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

// controllerManagerAlive reports whether the controller manager answers its /healthz; one that is
// not Ready counts as alive (its supervisor and the readiness probe handle it).
func (in *instance) controllerManagerAlive(ctx context.Context) bool {
	in.mu.Lock()
	ready := in.kcm.Ready
	url := "https://127.0.0.1:" + strconv.Itoa(in.meta.Ports.ControllerManager) + "/healthz"
	in.mu.Unlock()
	return !ready || in.alive(ctx, procControllerManager, func(ctx context.Context) error { _, err := get(ctx, in.probe, url); return err })
}

// apiServerAlive reports whether a Ready API server answers /livez.
func (in *instance) apiServerAlive(ctx context.Context) bool {
	in.mu.Lock()
	ready := in.api.Ready
	url := endpoint(in.b.opts.AdvertiseHost, in.meta.Ports.APIServer) + "/livez"
	in.mu.Unlock()
	return !ready || in.alive(ctx, procAPIServer, func(ctx context.Context) error { _, err := get(ctx, in.probe, url); return err })
}

// checkEtcd runs keepEtcdHealthy on the etcd of a Ready API server and notifies a change of what
// it reports.
func (in *instance) checkEtcd(ctx context.Context) {
	in.mu.Lock()
	ready := in.api.Ready
	in.mu.Unlock()
	if !ready {
		return
	}
	p := in.keepEtcdHealthy(ctx)
	in.mu.Lock()
	changed := (p == nil) != (in.etcdPart == nil) || (p != nil && in.etcdPart != nil && p.Message != in.etcdPart.Message)
	in.etcdPart = p
	in.mu.Unlock()
	if changed {
		in.b.notify(in)
	}
}

// etcdAlive reports whether the etcd of a Ready API server answers its health check.
func (in *instance) etcdAlive(ctx context.Context) bool {
	in.mu.Lock()
	ready := in.api.Ready
	in.mu.Unlock()
	return !ready || in.alive(ctx, procEtcd, in.etcdHealthy)
}

func (in *instance) alive(ctx context.Context, name string, check func(context.Context) error) bool {
	if err := check(ctx); err != nil {
		in.log.V(1).Info("A process of the cluster missed a health check", "process", name, "err", err.Error())
		return false
	}
	return true
}

// controllerManagerRuns reports whether the controller manager at url answers its /healthz, has
// built its controllers (their checks are listed) and has done its first work: the stock role
// view, served by the API server at apiURL, has its aggregated rules. A user who binds view as
// soon as the cluster is Ready gets what view means.
func (in *instance) controllerManagerRuns(ctx context.Context, url, apiURL string) error {
	body, err := get(ctx, in.probe, url+"/healthz?verbose")
	if err != nil {
		return err
	}
	if !strings.Contains(string(body), "[+]"+kcmReadyCheck+" ok") {
		return errors.New("kube-controller-manager has not started its controllers yet")
	}
	body, err = get(ctx, in.probe, apiURL+"/apis/rbac.authorization.k8s.io/v1/clusterroles/view")
	if err != nil {
		return err
	}
	var role struct {
		Rules []json.RawMessage `json:"rules"`
	}
	if err := json.Unmarshal(body, &role); err != nil || len(role.Rules) == 0 {
		return errors.New("the stock ClusterRole view is not aggregated yet")
	}
	return nil
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

// apiUp declares the API server Ready, unless a process it needs crashed since the probe began.
func (in *instance) apiUp(epoch int, version string) {
	in.mu.Lock()
	if in.api.epoch != epoch {
		in.mu.Unlock()
		in.trigger()
		return
	}
	changed := !in.api.Ready || in.version != version
	in.version = version
	in.api.Part = backend.Part{Ready: true, Reason: backend.ReasonRunning, Message: fmt.Sprintf("kube-apiserver %s serves on %s.", version,
		endpoint(in.b.opts.AdvertiseHost, in.meta.Ports.APIServer))}
	in.mu.Unlock()
	if changed {
		in.log.Info("The API server is ready", "version", version)
		in.b.notify(in)
	}
}

// kcmUp declares the controller manager Ready, unless it crashed since the probe began.
func (in *instance) kcmUp(epoch int) {
	in.mu.Lock()
	if in.kcm.epoch != epoch {
		in.mu.Unlock()
		in.trigger()
		return
	}
	changed := !in.kcm.Ready
	in.kcm.Part = backend.Part{Ready: true, Reason: backend.ReasonRunning,
		Message: "kube-controller-manager " + in.bins.Version + " runs its controllers."}
	in.mu.Unlock()
	if changed {
		in.log.Info("The controller manager is ready")
		in.b.notify(in)
	}
}

// down records that a part of the cluster does not work: a process failed to start, or exited
// (crashed, counted as a restart). etcd and kube-apiserver make the API server's part; the
// controller manager is its own.
func (in *instance) down(name, message string, crashed bool) {
	in.mu.Lock()
	pt := &in.api
	if name == procControllerManager {
		pt = &in.kcm
	}
	pt.epoch++
	pt.Part = backend.Part{Reason: backend.ReasonRestarting, Message: message}
	if crashed {
		in.restarts++
	}
	in.mu.Unlock()
	in.b.notify(in)
}

func (in *instance) setProcess(name string, p *process) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if p == nil {
		delete(in.pids, name)
		delete(in.procs, name)
	} else {
		in.pids[name] = p.pid()
		in.procs[name] = p
	}
}

// providerStatus is status.providerStatus of a local cluster.
type providerStatus struct {
	Backend  string     `json:"backend"`
	Version  string     `json:"version"`
	Ports    ports      `json:"ports"`
	Restarts int        `json:"restarts"`
	DataLost *time.Time `json:"dataLost,omitempty"`
	// ServiceCIDR is the cluster's service range (so that a lost record is rebuilt with it).
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// Encryption is the state of its encryption at rest (no secret).
	Encryption *encryption.Status `json:"encryption,omitempty"`
}

func (in *instance) state() backend.State {
	in.mu.Lock()
	defer in.mu.Unlock()
	url := endpoint(in.b.opts.AdvertiseHost, in.meta.Ports.APIServer)
	version := in.version
	if version == "" {
		version = in.bins.Version
	}
	kcm := in.kcm.Part
	s := backend.State{
		Ready:             in.api.Ready,
		Reason:            in.api.Reason,
		Message:           in.api.Message,
		ControllerManager: &kcm,
		Endpoint:          url,
		Endpoints:         map[string]string{backend.EndpointAPIServerExternal: url},
		CABundle:          in.pki.CAPEM,
		Version:           in.version,
		Runs:              in.meta.Version,
		Info:              fmt.Sprintf("%s v%s :%d", Name, version, in.meta.Ports.APIServer),
		ProviderStatus: providerStatus{
			Backend: Name, Version: "v" + in.meta.Version, Ports: in.meta.Ports, Restarts: in.restarts, DataLost: in.meta.DataLost,
			ServiceCIDR: in.meta.serviceCIDR(), Encryption: in.encryptionStatusLocked(),
		},
		Restarts: in.restarts,
		Restored: in.meta.Restored,
		Etcd:     &backend.Part{Ready: true, Reason: backend.ReasonRunning, Message: "No alarm: etcd's database is below its quota."},
	}
	if in.etcdPart != nil {
		s.Etcd = in.etcdPart
	}
	if t := in.meta.DataLost; t != nil && in.meta.LostPart == lostEtcd {
		s.DataLost = fmt.Sprintf("The cluster's etcd data folder %s was gone at %s although the cluster had run: etcd was started anew, EMPTY, with the cluster's CA, ports and kubeconfigs. "+
			"To bring back a backup of that folder, stop the operator, put it in place and start the operator again; this condition stays as a record.",
			filepath.Join(in.dir, etcdDataDir), t.UTC().Format(time.RFC3339))
	} else if t != nil {
		s.DataLost = fmt.Sprintf("The cluster's folder %s was gone at %s although the cluster had run (a lost volume?): the cluster was created anew, EMPTY, with a new CA; "+
			"its AccessRequests are granted again with new kubeconfigs. Restore nothing into it from the old folder: keep the state dir on a persistent volume (deploy/default does).",
			in.dir, t.UTC().Format(time.RFC3339))
	}
	if !in.api.Ready || !in.kcm.Ready {
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
