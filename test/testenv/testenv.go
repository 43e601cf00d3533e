// Package testenv is the one envtest harness of this project: it starts a real kube-apiserver and
// etcd (built by `make envtest`), installs the project's CRDs from deploy/crds and hands tests a
// client. Every integration test uses it; it must not know about any controller.
package testenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	apischeme "github.com/openmcp-local/cluster-provider/api/scheme"
	"github.com/openmcp-local/cluster-provider/deploy/crds"
	"github.com/openmcp-local/cluster-provider/deploy/policy"
)

// Scheme knows the built-in kinds, CRDs and every kind of this project.
var Scheme = apischeme.New()

// Env is a running API server with the project's CRDs installed.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is an uncached client for test setup and assertions.
	Client client.Client

	env     *envtest.Environment
	certDir string
}

// Start starts kube-apiserver and etcd and installs the CRDs. The binaries come from
// KUBEBUILDER_ASSETS, or else from the newest bin/k8s/* folder of the module (`make envtest`).
func Start() (*Env, error) {
	objs, err := crds.CRDs()
	if err != nil {
		return nil, err
	}
	e, err := startEnvtest("testenv-apiserver-", objs)
	if err != nil {
		return nil, err
	}
	// The admission policies every deployment has (deploy/policy), as `cluster-provider init`
	// applies them.
	pols, err := policy.Objects()
	if err == nil {
		for _, u := range pols {
			if err = e.Client.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("cluster-provider"), client.ForceOwnership); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = awaitPolicies(e.Client, e.Config)
	}
	if err != nil {
		_ = e.Stop()
		return nil, fmt.Errorf("applying the admission policies of deploy/policy: %w", err)
	}
	return e, nil
}

// StartBare starts a kube-apiserver and etcd with nothing installed, RBAC authorizing and
// service-account tokens issued as in any cluster: the one API server every cluster of a fake
// backend (backend/backendtest) hands out, apart from the platform's.
func StartBare() (*Env, error) { return startEnvtest("testenv-clusters-", nil) }

// startEnvtest starts kube-apiserver and etcd with defs installed, its certificates in a new
// folder named with prefix, and makes the Env's client.
func startEnvtest(prefix string, defs []*apiextensionsv1.CustomResourceDefinition) (*Env, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	// The API server's certificates live in a folder of ours, not one envtest makes and forgets on
	// Stop: StopAPIServer and StartAPIServer restart it on the same port with the same CA, so
	// clients made before keep working.
	certDir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{CertDir: certDir, StartTimeout: startTimeout, StopTimeout: apiServerStopTimeout},
			Etcd:      &envtest.Etcd{StartTimeout: startTimeout},
		},
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{CRDs: defs},
		ErrorIfCRDPathMissing: defs != nil,
		Scheme:                Scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		_ = os.RemoveAll(certDir)
		return nil, fmt.Errorf("starting envtest from %s: %w", assets, err)
	}
	e := &Env{Config: cfg, env: env, certDir: certDir}
	if e.Client, err = client.New(cfg, client.Options{Scheme: Scheme}); err != nil {
		_ = e.Stop()
		return nil, err
	}
	return e, nil
}

// startTimeout is how long etcd and the API server may take to start. envtest's default (20 s)
// was too short on a machine busy with other suites and a kind platform: the API server's start
// timed out five times in a row and the package failed before its first test.
const startTimeout = 2 * time.Minute

// apiServerStopTimeout is how long the API server may take to stop after SIGTERM before it is
// killed. Its graceful shutdown waits for long-running requests and has been seen to take more
// than 20 s.
const apiServerStopTimeout = 10 * time.Second

// StopAPIServer stops the API server and leaves etcd running: an outage of the platform's API.
// As kubelet stops a static pod, it sends SIGTERM and, after apiServerStopTimeout, SIGKILL (which
// is not an error here). The API server refuses connections from its first moments of shutting
// down. StartAPIServer ends the outage.
func (e *Env) StopAPIServer() error {
	err := e.env.ControlPlane.APIServer.Stop()
	if err != nil && strings.HasPrefix(err.Error(), "timeout waiting for process") {
		return nil // killed
	}
	return err
}

// StartAPIServer starts the API server stopped by StopAPIServer again, on the same address with
// the same certificates, and returns once it answers /healthz.
func (e *Env) StartAPIServer() error { return e.env.ControlPlane.APIServer.Start() }

// User returns a rest.Config of a new user, authenticated by a client certificate, with the
// given groups. The API server authorizes it by RBAC only: it may do what bindings grant.
func (e *Env) User(name string, groups ...string) (*rest.Config, error) {
	u, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding envtest user %s: %w", name, err)
	}
	return u.Config(), nil
}

// Stop stops the API server and etcd.
func (e *Env) Stop() error {
	err := e.env.Stop()
	return errors.Join(err, os.RemoveAll(e.certDir))
}

// Main is a TestMain body: it starts the environment into *env, runs the tests and stops it.
// A package whose tests need the API server calls os.Exit(testenv.Main(m, &env)). Each of bare
// gets an API server of StartBare, for the clusters of a fake backend.
func Main(m *testing.M, env **Env, bare ...**Env) int {
	// A fuzzing run (go test -fuzz, its coordinator and workers) runs one fuzz target of pure
	// code: no API server is started for it, and *env stays nil.
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		return m.Run()
	}
	// The API servers start at the same time: each takes seconds, mostly waiting.
	envs, errs := make([]*Env, 1+len(bare)), make([]error, 1+len(bare))
	var wg sync.WaitGroup
	for i := range envs {
		wg.Go(func() {
			if i == 0 {
				envs[i], errs[i] = Start()
			} else {
				envs[i], errs[i] = StartBare()
			}
		})
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "envtest:", err)
	}
	var started []*Env
	for i, e := range envs {
		if e == nil {
			continue
		}
		started = append(started, e)
		if i == 0 {
			*env = e
		} else {
			*bare[i-1] = e
		}
	}
	code := 1
	if err == nil {
		code = m.Run()
	}
	for _, s := range started {
		if err := s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// EventWithin bounds AwaitEvent's wait.
const EventWithin = time.Minute

// AwaitEvent waits until an events.k8s.io Event with reason is about regarding (same namespace,
// name and, when regarding has one, UID) and returns it; after EventWithin it fails the test.
// Events are recorded asynchronously (an event broadcaster writes them from its own goroutine,
// after the reconcile that emitted them may have finished), so a test never checks for one at
// once.
func (e *Env) AwaitEvent(t testing.TB, regarding client.Object, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &eventsv1.EventList{}
		require.NoError(c, e.Client.List(context.Background(), list), "listing Events")
		var reasons []string
		for _, ev := range list.Items {
			r := ev.Regarding
			if r.Namespace != regarding.GetNamespace() || r.Name != regarding.GetName() || regarding.GetUID() != "" && r.UID != regarding.GetUID() {
				continue
			}
			if ev.Reason == reason {
				found = ev
				return
			}
			reasons = append(reasons, ev.Reason)
		}
		c.Errorf("no Event %s about %s yet; its Events: %v", reason, client.ObjectKeyFromObject(regarding), reasons)
	}, EventWithin, eventPoll)
	return found
}

// eventPoll is how often AwaitEvent lists the Events.
const eventPoll = 50 * time.Millisecond

// Namespace creates a namespace with a generated name for one test and returns its name.
// envtest runs no namespace controller, so it is not deleted afterwards; names never collide.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// AssetsDir is the folder of the envtest binaries (kube-apiserver, etcd): KUBEBUILDER_ASSETS, or
// else the newest bin/k8s/* folder of the module (`make envtest`).
func AssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "bin", "k8s", "*", "kube-apiserver"))
	if len(dirs) == 0 {
		return "", fmt.Errorf("no envtest binaries: run `make envtest` (or `make test`), or set KUBEBUILDER_ASSETS")
	}
	sort.Strings(dirs)
	return filepath.Dir(dirs[len(dirs)-1]), nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// stopWithin bounds how long RunManager's cleanup waits for a manager to stop.
const stopWithin = time.Minute

// RunManager starts mgr until the test ends, with a context that cancel ends. The cleanup cancels
// it, waits until Start has returned (failing the test on an error, or if it does not return
// within a minute), then runs after, in order.
func RunManager(t testing.TB, ctx context.Context, cancel context.CancelFunc, mgr manager.Manager, after ...func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the manager stopped with an error: %v", err)
			}
		case <-time.After(stopWithin):
			t.Error("the manager did not stop")
		}
		for _, f := range after {
			f()
		}
	})
}

// RoundTripperFunc is an http.RoundTripper made of a function: tests wrap a client's transport
// with it (rest.Config.WrapTransport) to count or observe the client's requests.
type RoundTripperFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// NewManager returns a manager on cfg for a test's controllers: the project's scheme, logger, no
// metrics server, controller names not checked for uniqueness (tests run the same controller in
// several managers of one process) and panics not recovered (a panic fails the test binary).
func NewManager(tb testing.TB, cfg *rest.Config, logger logr.Logger) manager.Manager {
	tb.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  Scheme,
		Logger:  logger,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{
			SkipNameValidation: ptr.To(true),
			RecoverPanic:       ptr.To(false),
		},
	})
	require.NoError(tb, err)
	return mgr
}

// RunUntil starts mgr, waits until finished is closed (failing after within, or if the manager
// stops first), stops it and returns the time from its start until finished.
func RunUntil(tb testing.TB, mgr manager.Manager, finished <-chan struct{}, within time.Duration) time.Duration {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- mgr.Start(ctx) }()
	select {
	case <-finished:
	case err := <-done:
		tb.Fatalf("the manager stopped: %v", err)
	case <-time.After(within):
		tb.Fatalf("not finished after %s", within)
	}
	elapsed := time.Since(start)
	cancel()
	require.NoError(tb, <-done)
	return elapsed
}

// awaitPolicies waits until the API server enforces the admission policies of deploy/policy: it
// loads them from its informers a moment after they are written. It asks, as a user who may create
// AccessRequests and nothing else, for a dry-run AccessRequest that references another
// namespace's Cluster, until refused.
func awaitPolicies(admin client.Client, cfg *rest.Config) error {
	const user = "testenv:policy-probe"
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "testenv-policy-probe"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{clustersv1alpha1.GroupVersion.Group}, Resources: []string{"accessrequests"}, Verbs: []string{"create"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: role.ObjectMeta,
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := admin.Create(ctx, o); err != nil {
			return err
		}
		defer admin.Delete(ctx, o) //nolint:errcheck // a leftover grants the probe user alone
	}
	probe := rest.CopyConfig(cfg)
	probe.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(probe, client.Options{Scheme: Scheme})
	if err != nil {
		return err
	}
	ar := &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "policy-probe"},
		Spec: clustersv1alpha1.AccessRequestSpec{
			ClusterRef: &common.ObjectReference{Name: "probe", Namespace: "kube-system"},
			Token:      &clustersv1alpha1.TokenConfig{},
		},
	}
	var last error
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = c.Create(ctx, ar.DeepCopy(), client.DryRunAll)
		return last != nil && strings.Contains(last.Error(), "may not use it"), nil
	})
	if err != nil {
		return fmt.Errorf("the admission policies of deploy/policy are not enforced after a minute (last answer: %v)", last)
	}
	return nil
}
