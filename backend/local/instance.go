package local

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
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
	b    *Backend
	dir  string
	bins Binaries
	pki  *pki
	// logp is the cluster's logger (logger): a claimed spare's names its Cluster from then on.
	logp  atomic.Pointer[logr.Logger]
	probe *http.Client // authenticates as the admin; verifies the cluster CA
	etcd  *http.Client // reaches etcd's client socket
	// etcdMaint reaches it too, without the probes' timeout: a defragmentation takes its time.
	etcdMaint *http.Client
	// authMu serializes writes of the authentication configuration file; metaMu those of the
	// record by persist.
	authMu sync.Mutex
	metaMu sync.Mutex

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
	// caErr is why the last renewal of the certificates or step of the CA rotation failed.
	caErr string

	// cancel ends the processes of the current run, done is closed when they have stopped (nil
	// for a cluster adopted hibernated: it never ran here). A wake starts a new run.
	cancel context.CancelFunc
	done   chan struct{}
	served time.Time // when the idle loop first saw the current run complete: the idle clock's start
	// readyCh, when not nil, is closed when the API server is next declared Ready (waitServing).
	readyCh chan struct{}
	// Hibernation (hibernate.go): idleAfter is the profile's spec.hibernation.idleAfter; waking
	// and sleeping are set while a wake or a hibernation is under way; notices are the Normal
	// Events for the next Ensure.
	idleAfter time.Duration
	waking    bool
	sleeping  bool
	woken     bool // started by a wake, until its controller manager is Ready
	// holds counts the operator's uses that need the processes (a snapshot): no idle hibernation
	// meanwhile.
	holds   atomic.Int32
	notices []backend.Warning
	killNow atomic.Bool // stop with SIGKILL, not SIGTERM (the cluster is being deleted)
	// hung holds, by process name, the processes stopped for missing their health checks, so
	// that their exits say why. Guarded by mu.
	hung    map[string]bool
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
		etcd:      etcd,
		etcdMaint: &http.Client{Transport: etcd.Transport},
		api:       part{Part: starting},
		kcm:       part{Part: starting},
		pids:      map[string]int{},
		procs:     map[string]*process{},
		recheck:   make(chan struct{}, 1),
	}
	in.setLogger(m)
	// The probe presents the admin certificate of the moment and verifies the API server with the
	// trust bundle of the moment: a renewal or a CA rotation (renewIfDue) needs no new client.
	if _, err := trustPool(p.CAPEM); err != nil {
		return nil, err
	}
	in.probe = &http.Client{Timeout: probeTimeout, Transport: &http.Transport{
		DialTLSContext:  in.dialTLS,
		IdleConnTimeout: 90 * time.Second,
	}}
	in.api.Message = "etcd and kube-apiserver " + bins.Version + " are starting."
	in.kcm.Message = "kube-controller-manager " + bins.Version + " starts once the API server answers."
	return in, nil
}

// logger is the logger of in's cluster.
func (in *instance) logger() logr.Logger { return *in.logp.Load() }

// setLogger names the cluster of record m in in's logs.
func (in *instance) setLogger(m meta) {
	l := in.b.log.WithValues("cluster", m.Namespace+"/"+m.Name, "uid", m.UID)
	in.logp.Store(&l)
}

// adminConfig is the admin's config of in's API server, reached directly (not through the front
// door: the operator's own use does not count as a client's).
func (in *instance) adminConfig() *rest.Config {
	in.mu.Lock()
	defer in.mu.Unlock()
	return adminConfig(in.apiURLLocked(), in.pki)
}

// apiURLLocked is the URL of the API server itself, on its own port (in.mu held).
func (in *instance) apiURLLocked() string {
	return endpoint(in.b.opts.AdvertiseHost, in.meta.Ports.Internal)
}

// apiURL is apiURLLocked.
func (in *instance) apiURL() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.apiURLLocked()
}

// upstream is the address the front door passes connections to: the API server's own port.
func (in *instance) upstream() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return net.JoinHostPort(dialHost(in.b.opts.AdvertiseHost), strconv.Itoa(in.meta.Ports.Internal))
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

// start runs the processes until stop: a new run (after hibernation, a wake).
func (in *instance) start() {
	in.recordCertificates()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	in.mu.Lock()
	in.cancel, in.done, in.served = cancel, done, time.Time{}
	in.mu.Unlock()
	go in.run(ctx, done)
}

// stop stops the processes of the current run (kill: at once, else gracefully, kube-apiserver
// first) and returns when they have exited; at once when none runs (hibernated).
func (in *instance) stop(kill bool) {
	if kill {
		in.killNow.Store(true)
	}
	in.mu.Lock()
	cancel, done := in.cancel, in.done
	in.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (in *instance) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	etcdCtx, stopEtcd := context.WithCancel(context.Background())
	var etcdWG, wg sync.WaitGroup
	etcdWG.Go(func() { in.supervise(etcdCtx, procEtcd, in.startEtcd) })
	in.mu.Lock()
	woken := in.woken
	in.mu.Unlock()
	// A woken cluster's etcd starts on data it served before: its API server starts beside it
	// (it waits for etcd's socket by itself), which saves etcd's start from every wake.
	if woken || in.waitEtcd(ctx) {
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
	bo := restartBackoff()
	for ctx.Err() == nil {
		p, err := start(ctx)
		if p == nil && err == nil {
			return
		}
		if err != nil {
			backoff := bo.Step()
			in.down(name, fmt.Sprintf("%s could not be started: %v; retrying in %s.", name, err, backoff), false)
			if !sleep(ctx, backoff) {
				return
			}
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
			bo = restartBackoff()
		}
		backoff := bo.Step()
		why := fmt.Sprintf("exited (%s)", exitText(p.err))
		if in.takeHung(name) {
			why = fmt.Sprintf("missed %d health checks in a row and was stopped", failuresAllowed(name))
		}
		in.logger().Info("A process of the cluster exited; restarting it", "process", name, "why", why, "backoff", backoff)
		in.down(name, fmt.Sprintf("%s %s; restarting it in %s (logs in %s).",
			name, why, backoff, filepath.Join(in.dir, logDir)), true)
		if !sleep(ctx, backoff) {
			return
		}
	}
}

// restartBackoff is the delay before a process is started again: minBackoff, doubling after
// each exit in a row, at most maxBackoff.
func restartBackoff() wait.Backoff {
	return wait.Backoff{Duration: minBackoff, Factor: 2, Cap: maxBackoff, Steps: math.MaxInt32}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func (in *instance) startEtcd(context.Context) (*process, error) {
	t := in.b.opts.Tuning
	return startProcess(in.bins.Etcd(), append(etcdArgs(in.dir, t.etcdQuota()), t.EtcdArgs...), t.env(t.EtcdGOMEMLIMIT, ""), in.dir, filepath.Join(in.dir, logDir, etcdLogFile))
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
		t.env(t.APIServerGOMEMLIMIT, t.APIServerGOGC), in.dir, filepath.Join(in.dir, logDir, apiLogFile))
}

// startControllerManager starts kube-controller-manager once the API server answers /healthz: it
// gives up (and exits) when the API server does not answer within 10 s, which a cold start under
// load can take. Its kubeconfig is written anew each time, so it follows the API server's port.
func (in *instance) startControllerManager(ctx context.Context) (*process, error) {
	in.mu.Lock()
	woken := in.woken
	in.mu.Unlock()
	held := time.Now()
	for {
		// A woken cluster's controller manager starts once its API server serves the requests
		// that wait at its front door, and no other wake waits (kcmHeldForWakes): 2 cores shared.
		if woken && !in.waitServing(ctx, probeInterval) {
			if ctx.Err() != nil {
				return nil, nil
			}
			continue
		}
		if woken && in.b.waking.Load() > 0 && time.Since(held) < kcmHeldForWakes {
			if !sleep(ctx, probeInterval) {
				return nil, nil
			}
			continue
		}
		url := in.apiURL()
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
	if err := writeKubeconfig(filepath.Join(in.dir, kcmKubeconfig), endpoint(in.b.opts.AdvertiseHost, p.Internal), ca, cert, key); err != nil {
		return nil, fmt.Errorf("writing its kubeconfig: %w", err)
	}
	t := in.b.opts.Tuning
	return startProcess(in.bins.ControllerManager(), controllerManagerArgs(in.dir, in.meta.serviceCIDR(), p, *t),
		t.env(t.ControllerManagerGOMEMLIMIT, ""), in.dir, filepath.Join(in.dir, logDir, kcmLogFile))
}

// renewIfDue issues the cluster's leaf certificates anew once the first is due (the lifetime's
// RenewBefore its end, or the CA rotation replacing their CA), and moves the CA rotation on when
// its time has come (carotation.go), while the cluster runs: kube-apiserver reloads its serving
// certificate and its client CAs (the trust bundle) by itself (it watches the files), the
// operator's probe and AdminConfig use the new admin certificate and bundle from then on, and the
// controller manager is restarted to read its new client and serving certificates, signing CA
// and root CA bundle (the API server keeps serving). A failure is logged, reported by the
// CertificatesValid condition and tried again at the next health check.
func (in *instance) renewIfDue() {
	in.mu.Lock()
	due := !time.Now().Before(in.pki.RenewAt)
	m := in.meta
	phase := in.pki.rotation.Phase
	in.mu.Unlock()
	if !due {
		return
	}
	p, err := in.b.loadPKI(in.dir, m)
	if err != nil {
		in.logger().Error(err, "Renewing the cluster's certificates failed; trying again at the next health check")
		in.setCAError(err)
		return
	}
	in.mu.Lock()
	in.pki = p
	failed := in.caErr != ""
	in.caErr = ""
	in.mu.Unlock()
	// A kept connection authenticates with the admin certificate of its handshake: once the old
	// CA is dropped from the bundle, one of the old CA would be refused (401).
	in.probe.CloseIdleConnections()
	in.recordCertificates()
	in.logger().Info("Renewed the cluster's certificates", "nextRenewal", p.RenewAt.UTC().Format(time.RFC3339), "certs.Rotation", string(p.rotation.Phase))
	in.restart(procControllerManager)
	if p.rotation.Phase != phase || failed {
		in.logger().Info("The CA rotation moved on", "from", string(phase), "to", string(p.rotation.Phase))
		in.b.notify(in)
	}
}

// recordCertificates sets the expiry gauges of the cluster's certificates and CAs.
func (in *instance) recordCertificates() {
	in.mu.Lock()
	if in.meta.Spare != "" { // no Cluster yet: recorded when one claims it (pool.go)
		in.mu.Unlock()
		return
	}
	ref := backend.Ref{NamespacedName: types.NamespacedName{Namespace: in.meta.Namespace, Name: in.meta.Name}, Profile: in.meta.Profile}
	notAfter := maps.Clone(in.pki.NotAfter)
	caNotAfter := maps.Clone(in.pki.CANotAfter)
	in.mu.Unlock()
	backend.RecordCertificates(ref, notAfter)
	backend.RecordCAs(ref, caNotAfter)
}

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
