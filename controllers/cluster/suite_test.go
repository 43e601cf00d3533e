package cluster_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/local"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
	"github.com/openmcp-local/cluster-provider/manager"
	"github.com/openmcp-local/cluster-provider/providerconfig"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

const (
	testProvider    = "clustertest"
	testEnvironment = "default"
)

// operator is what `cluster-provider run` runs, with the real local backend.
type operator struct {
	engine *manager.Engine
	local  *local.Backend
}

// startOperator runs the engine, the ProviderConfig controller and the local backend (state in
// stateDir, at most maxClusters) in a manager until the test ends.
func startOperator(t *testing.T, stateDir string, maxClusters int) *operator {
	t.Helper()
	assets, err := testenv.AssetsDir()
	require.NoError(t, err)
	bins, err := local.LoadBinaries(t.Context(), []string{assets})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     testenv.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	require.NoError(t, err)
	e, err := manager.New(ctx, mgr.GetCache(), manager.Options{Scheme: testenv.Scheme, Kinds: profile.Kinds(testProvider)})
	require.NoError(t, err)
	require.NoError(t, mgr.Add(e))
	reader := mgr.GetAPIReader()
	lb, err := local.New(local.Options{
		Binaries:    bins,
		StateDir:    stateDir,
		MaxClusters: maxClusters,
		StopGrace:   5 * time.Second,
		Notify: func(r backend.Ref) {
			e.Enqueue(profile.KindCluster, r.Profile, reconcile.Request{NamespacedName: r.NamespacedName})
		},
		ListClusters: func(ctx context.Context) ([]clustersv1alpha1.Cluster, error) {
			list := &clustersv1alpha1.ClusterList{}
			err := reader.List(ctx, list)
			return list.Items, err
		},
	})
	require.NoError(t, err)
	require.NoError(t, mgr.Add(lb))
	backends := backend.Registry{local.Name: lb}
	rec := &providerconfig.Reconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("providerconfig"),
		Engine:   e,
		Builder: &profile.Builder{
			Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("cluster-provider"), ProviderName: testProvider,
			Backends: backends,
		},
		Backends:     backends,
		ProviderName: testProvider,
		Environment:  testEnvironment,
	}
	require.NoError(t, rec.SetupWithManager(mgr))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Error("the operator did not stop")
		}
	})
	<-e.Ready()
	return &operator{engine: e, local: lb}
}
