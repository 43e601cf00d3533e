package cluster_test

import (
	"os"
	"testing"

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
// maxClusters) until the test ends.
func startOperator(t *testing.T, stateDir string, maxClusters int) *operator.Operator {
	t.Helper()
	return operator.Start(t, env, operator.Options{ProviderName: testProvider, Environment: testEnvironment, StateDir: stateDir, MaxClusters: maxClusters})
}
