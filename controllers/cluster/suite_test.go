package cluster_test

import (
	"os"
	"testing"

	"github.com/openmcp-local/cluster-provider/backend/backendtest"
	"github.com/openmcp-local/cluster-provider/test/operator"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

const (
	testProvider    = "clustertest"
	testEnvironment = "default"
)

// startOperator runs the operator with the real local backend (state in stateDir, at most
// maxClusters) until the test ends: for the tests named ...WithLocalBackend.
func startOperator(t *testing.T, stateDir string, maxClusters int) *operator.Operator {
	t.Helper()
	return operator.Start(t, env, operator.Options{ProviderName: testProvider, Environment: testEnvironment, StateDir: stateDir, MaxClusters: maxClusters})
}

// startFake runs the operator with a fake backend (backend/backendtest) until the test ends. The
// fake clusters' endpoint is the platform's API server; no test of this package uses it as a
// cluster.
func startFake(t *testing.T, o backendtest.Options) *backendtest.Fake {
	t.Helper()
	if o.Server == nil {
		o.Server = env.Config
	}
	f := backendtest.New(o)
	operator.Start(t, env, operator.Options{ProviderName: testProvider, Environment: testEnvironment, Backend: f})
	return f
}
