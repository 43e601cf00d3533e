package providerconfig

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
	"github.com/openmcp-local/cluster-provider/manager"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

const (
	testProvider    = "test"
	testEnvironment = "default"
)

// countingEngine counts, per profile, the starts that really (re)started it.
type countingEngine struct {
	*manager.Engine
	mu     sync.Mutex
	starts map[string]int
}

func (c *countingEngine) StartProfile(ctx context.Context, p manager.Profile) error {
	hash, running := c.Engine.Running(p.Name)
	if err := c.Engine.StartProfile(ctx, p); err != nil {
		return err
	}
	if !running || hash != p.Hash {
		c.mu.Lock()
		c.starts[p.Name]++
		c.mu.Unlock()
	}
	return nil
}

func (c *countingEngine) startsOf(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.starts[name]
}

// startOperator runs what `cluster-provider run` runs (engine, ProviderConfig controller,
// per-profile reconcilers) in a manager until the test ends. Every test starts its own, so that
// one test can also restart it; they all use the same provider name, as restarts of one
// operator do.
func startOperator(t *testing.T) *countingEngine {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     testenv.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	require.NoError(t, err)
	e, err := manager.New(ctx, mgr.GetCache(), manager.Options{Scheme: testenv.Scheme, Kinds: profile.Kinds(testProvider, profile.Workers{})})
	require.NoError(t, err)
	require.NoError(t, mgr.Add(e))
	counting := &countingEngine{Engine: e, starts: map[string]int{}}
	backends := backend.Registry{string(providersv1alpha1.BackendLocal): versionsBackend{}}
	rec := &Reconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("providerconfig"),
		Engine:   counting,
		Builder: &profile.Builder{
			Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("cluster-provider"), ProviderName: testProvider,
			Backends: backends,
		},
		Backends:     backends,
		ProviderName: testProvider,
		Environment:  testEnvironment,
	}
	require.NoError(t, rec.SetupWithManager(mgr))
	testenv.RunManager(t, ctx, cancel, mgr, func() { <-e.Done() })
	<-e.Ready()
	return counting
}

// versionsBackend is a test double of a backend: these tests are about the ProviderConfig
// lifecycle, not clusters (controllers/cluster tests the real local backend). It serves
// servedVersions and reports every cluster as provisioned but never ready; deletion is immediate.
type versionsBackend struct{}

var servedVersions = []string{"1.38.0", "1.37.1", "1.36.3"}

func (versionsBackend) Name() string                                                   { return "local" }
func (versionsBackend) Versions() []string                                             { return servedVersions }
func (b versionsBackend) ForProfile(*providersv1alpha1.ProviderConfig) backend.Backend { return b }
func (versionsBackend) Ensure(context.Context, *clustersv1alpha1.Cluster, backend.Want) (backend.State, error) {
	return backend.State{Reason: backend.ReasonStarting, Message: "test double: never ready"}, nil
}
func (versionsBackend) Delete(context.Context, *clustersv1alpha1.Cluster) (bool, error) {
	return true, nil
}
func (versionsBackend) AdminConfig(context.Context, *clustersv1alpha1.Cluster) (*rest.Config, error) {
	return nil, errors.New("test double: no cluster")
}

// fakePools is what versionsBackend.SetPool was told last, by profile, and how many spares it
// reports ready for a profile (ready; none unless a test says so).
var fakePools = struct {
	sync.Mutex
	set   map[string]backend.Pool
	ready map[string]int
}{set: map[string]backend.Pool{}, ready: map[string]int{}}

func (versionsBackend) SetPool(profile string, p backend.Pool) backend.PoolState {
	fakePools.Lock()
	defer fakePools.Unlock()
	fakePools.set[profile] = p
	ready := min(fakePools.ready[profile], p.Size)
	return backend.PoolState{Ready: ready, Starting: p.Size - ready}
}

// poolOf is what versionsBackend.SetPool was told last for profile, and whether it was told.
func poolOf(profile string) (backend.Pool, bool) {
	fakePools.Lock()
	defer fakePools.Unlock()
	p, ok := fakePools.set[profile]
	return p, ok
}

func profileName(pc *providersv1alpha1.ProviderConfig) string {
	return profile.Name(testEnvironment, testProvider, pc.Name)
}
