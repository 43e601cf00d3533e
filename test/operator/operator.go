// Package operator runs, inside a test, what `cluster-provider run` runs: the controller engine
// with its secondary watches, the ProviderConfig controller, the real local backend (or a fake
// one, Options.Backend) and, if asked, the central AccessRequest labeller, in one controller-runtime manager against envtest.
// It is the one such harness; the controllers' integration tests share it.
package operator

import (
	"context"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/local"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/labeller"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
	"github.com/openmcp-local/cluster-provider/manager"
	"github.com/openmcp-local/cluster-provider/providerconfig"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

var logOnce sync.Once

func logWriter() io.Writer {
	if os.Getenv("TEST_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}

// Options say what to run. Zero values take the defaults named.
type Options struct {
	// ProviderName is --provider-name. Required.
	ProviderName string
	// Environment is --environment. Default "default".
	Environment string
	// StateDir is the local backend's --state-dir. Default a new temporary folder.
	StateDir string
	// MaxClusters is --local-max-clusters. Default 20.
	MaxClusters int
	// StateRetry is how soon the local backend tries a damaged or full cluster folder again.
	// Default the backend's (30s).
	StateRetry time.Duration
	// Access configures the AccessRequest reconcilers (Environment is set from Environment).
	Access accessrequest.Options
	// Labeller runs the central AccessRequest labeller too.
	Labeller bool
	// Workers per profile and kind (--cluster-workers, --accessrequest-workers). Default 1 each.
	Workers profile.Workers
	// NoSecretWatch runs the operator as one that may not list and watch Secrets (deploy/rbac):
	// no Secret informer; Secrets are read from the API server.
	NoSecretWatch bool
	// Backend, when set, runs the clusters instead of the real local backend (a
	// backend/backendtest Fake): it serves the ProviderConfigs whose spec.backend is its Name, and
	// if it has a SetNotify method, it gets the engine's notification. Local is then nil, and
	// StateDir, MaxClusters and StateRetry do nothing.
	Backend backend.Backend
}

// notifiable is a Backend whose notification is set after it is made (backendtest.Fake).
type notifiable interface{ SetNotify(backend.Notify) }

// Operator is a running operator.
type Operator struct {
	Engine *manager.Engine
	Local  *local.Backend
	// Manager runs everything; its client reads the shared cache.
	Manager ctrl.Manager
}

// Start runs the operator against env until the test ends (it stops then and fails the test if it
// does not stop within a minute), and returns once the engine routes events.
func Start(t testing.TB, env *testenv.Env, o Options) *Operator {
	t.Helper()
	if o.Environment == "" {
		o.Environment = "default"
	}
	if o.StateDir == "" {
		o.StateDir = t.TempDir()
	}
	o.Access.Environment = o.Environment
	logOnce.Do(func() {
		// TEST_LOG=1 shows the operator's log; by default it is dropped.
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(logWriter())))
	})
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     testenv.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:      profile.CacheOptions(!o.NoSecretWatch),
		Client:     profile.ClientOptions(!o.NoSecretWatch),
	})
	require.NoError(t, err)
	e, err := profile.NewEngine(ctx, mgr.GetCache(), testenv.Scheme, o.ProviderName, o.Workers, !o.NoSecretWatch, ctrl.Log.WithName("engine"))
	require.NoError(t, err)
	require.NoError(t, mgr.Add(e))
	notify := func(r backend.Ref) {
		e.Enqueue(profile.KindCluster, r.Profile, reconcile.Request{NamespacedName: r.NamespacedName})
	}
	var lb *local.Backend
	var backends backend.Registry
	if o.Backend != nil {
		if n, ok := o.Backend.(notifiable); ok {
			n.SetNotify(notify)
		}
		backends = backend.Registry{o.Backend.Name(): o.Backend}
	} else {
		lb = startLocal(t, mgr, o, notify)
		backends = backend.Registry{local.Name: lb}
	}
	rec := &providerconfig.Reconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("providerconfig"),
		Engine:   e,
		Builder: &profile.Builder{
			Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("cluster-provider"), ProviderName: o.ProviderName,
			Backends: backends, Access: withSecretReader(o.Access, mgr.GetAPIReader()),
		},
		Backends:     backends,
		ProviderName: o.ProviderName,
		Environment:  o.Environment,
	}
	require.NoError(t, rec.SetupWithManager(mgr))
	if o.Labeller {
		require.NoError(t, (&labeller.Reconciler{}).SetupWithManager(mgr))
	}
	testenv.RunManager(t, ctx, cancel, mgr)
	<-e.Ready()
	return &Operator{Engine: e, Local: lb, Manager: mgr}
}

// withSecretReader sets a's SecretReader, as the operator does, unless the test set one.
func withSecretReader(a accessrequest.Options, r client.Reader) accessrequest.Options {
	if a.SecretReader == nil {
		a.SecretReader = r
	}
	return a
}

// startLocal makes the real local backend with o's settings and adds it to mgr.
func startLocal(t testing.TB, mgr ctrl.Manager, o Options, notify backend.Notify) *local.Backend {
	t.Helper()
	assets, err := testenv.AssetsDir()
	require.NoError(t, err)
	bins, err := local.LoadBinaries(t.Context(), []string{assets})
	require.NoError(t, err)
	reader := mgr.GetAPIReader()
	lb, err := local.New(local.Options{
		Binaries:    bins,
		StateDir:    o.StateDir,
		MaxClusters: o.MaxClusters,
		StateRetry:  o.StateRetry,
		StopGrace:   5 * time.Second,
		Notify:      notify,
		ListClusters: func(ctx context.Context) ([]clustersv1alpha1.Cluster, error) {
			list := &clustersv1alpha1.ClusterList{}
			err := reader.List(ctx, list)
			return list.Items, err
		},
	})
	require.NoError(t, err)
	require.NoError(t, mgr.Add(lb))
	return lb
}
