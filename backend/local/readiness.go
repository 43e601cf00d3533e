package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/openmcp-local/cluster-provider/backend"
)

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
					in.logger().Info("A process of the cluster missed its health checks; restarting it", "process", name, "missed", failuresAllowed(name))
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
			url := in.apiURLLocked()
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

// wokenReadyz are the checks of /readyz a woken cluster is served without: the post-start hooks
// that make the bootstrap objects (the stock roles and priority classes), which its data holds
// since its first start. The priority classes' hook polls once a second: waiting for it would
// add up to a second to every wake (BenchmarkWake).
const wokenReadyz = "?exclude=poststarthook/scheduling/bootstrap-system-priority-classes&exclude=poststarthook/rbac/bootstrap-roles"

func (in *instance) serving(ctx context.Context, url string) (string, error) {
	if err := in.etcdHealthy(ctx); err != nil {
		return "", err
	}
	in.mu.Lock()
	woken := in.woken
	in.mu.Unlock()
	ready := "/readyz"
	if woken {
		ready += wokenReadyz
	}
	if _, err := get(ctx, in.probe, url+ready); err != nil {
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
	url := in.apiURLLocked() + "/livez"
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
		in.logger().V(1).Info("A process of the cluster missed a health check", "process", name, "err", err.Error())
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
	if in.readyCh != nil {
		close(in.readyCh)
		in.readyCh = nil
	}
	in.mu.Unlock()
	if changed {
		in.logger().Info("The API server is ready", "version", version)
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
	changed := !in.kcm.Ready || in.woken
	in.woken = false // awake: from now on its parts say what they are
	in.kcm.Part = backend.Part{Ready: true, Reason: backend.ReasonRunning,
		Message: "kube-controller-manager " + in.bins.Version + " runs its controllers."}
	in.mu.Unlock()
	if changed {
		in.logger().Info("The controller manager is ready")
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
