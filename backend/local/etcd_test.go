package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// EnvEtcdBinaries names etcd binaries of other release lines than the envtest one (a list of
// paths, joined as PATH is), for TestEtcdLines. `make test` builds etcd 3.5 and 3.6 from the Go
// module proxy (ETCD_LINES) and sets it.
const EnvEtcdBinaries = "LOCAL_ETCD_BINARIES"

// TestEtcdLines: a cluster starts with the etcd of every release line a served Kubernetes
// version requires (3.5 up to Kubernetes 1.33, 3.6 for 1.34 to 1.36, 3.7 since 1.37): the
// folder is accepted by LoadBinaries (whose start check runs etcd with a cluster's flags) and a
// cluster of it becomes Ready, its API server writing and reading through etcd's unix socket,
// and etcd listens on no TCP port. The envtest etcd (3.7) is always tried; without the other
// lines the test then skips, or fails with CI set.
func TestEtcdLines(t *testing.T) {
	assets, err := testenv.AssetsDir()
	require.NoError(t, err)
	etcds := []string{filepath.Join(assets, "etcd")}
	if v := os.Getenv(EnvEtcdBinaries); v != "" {
		etcds = append(etcds, filepath.SplitList(v)...)
	}
	lines := map[string]bool{}
	for _, etcd := range etcds {
		out, err := exec.Command(etcd, "--version").Output()
		require.NoError(t, err, etcd)
		version := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(out), "\n", 2)[0], "etcd Version:"))
		lines[strings.Join(strings.SplitN(version, ".", 3)[:2], ".")] = true
		t.Run("etcd "+version, func(t *testing.T) {
			// A folder of the envtest kube-apiserver and kube-controller-manager with this etcd.
			dir := t.TempDir()
			for _, f := range []string{"kube-apiserver", "kube-controller-manager"} {
				require.NoError(t, os.Symlink(filepath.Join(assets, f), filepath.Join(dir, f)))
			}
			require.NoError(t, os.Symlink(etcd, filepath.Join(dir, "etcd")))
			bins, err := LoadBinaries(t.Context(), []string{dir})
			require.NoError(t, err)

			h := startBackendWith(t, bins, t.TempDir(), 1)
			cl := newCluster("etcd-" + strings.ReplaceAll(version, ".", "-"))
			h.await(cl, "Ready with etcd "+version, ready)
			cfg, err := h.b.AdminConfig(t.Context(), cl)
			require.NoError(t, err)
			// A cluster-scoped object: it needs no namespace the API server creates after Ready.
			nss := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces()
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "written", Labels: map[string]string{"etcd": version}}}
			_, err = nss.Create(t.Context(), ns, metav1.CreateOptions{})
			require.NoError(t, err)
			got, err := nss.Get(t.Context(), ns.Name, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, version, got.Labels["etcd"])
			checkEtcdPrivate(t, h.b.Dir(cl.UID), h.b.PIDs(cl.UID)[procEtcd])

			gone, err := h.b.Delete(t.Context(), cl)
			require.NoError(t, err)
			assert.True(t, gone)
		})
	}
	if os.Getenv(EnvEtcdBinaries) == "" {
		testenv.MissingTool(t, "etcd 3.5 and 3.6 ("+EnvEtcdBinaries+", set by make test)", os.ErrNotExist)
	}
	assert.Equal(t, map[string]bool{"3.5": true, "3.6": true, "3.7": true}, lines, "every etcd line")
}

// TestLoadBinariesEtcdCannotStart: a folder whose etcd reports a version but exits at once with
// a cluster's flags (as etcd 3.6 did on the unix peer URL) is refused at load time, naming the
// folder and quoting etcd's error, so its version is never offered.
func TestLoadBinariesEtcdCannotStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "k8s-1.36")
	fakeBinary(t, dir, "kube-apiserver", echoVersion("1.36.3"), 0o755)
	fakeBinary(t, dir, "kube-controller-manager", echoVersion("1.36.3"), 0o755)
	fakeBinary(t, dir, "etcd", `#!/bin/sh
if [ "$1" = --version ]; then echo "etcd Version: 3.6.6"; exit 0; fi
echo '{"level":"warn","msg":"failed to verify flags","error":"--initial-advertise-peer-urls \"unix://peer.sock\" must be \"host:port\""}' >&2
exit 1
`, 0o755)
	_, err := LoadBinaries(t.Context(), []string{dir})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--local-binaries folder "+dir+": ")
	assert.Contains(t, err.Error(), "cannot run a cluster's etcd")
	assert.Contains(t, err.Error(), `failed to verify flags: --initial-advertise-peer-urls "unix://peer.sock" must be "host:port"`)
}

func TestLastLine(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"", ""},
		{"one\ntwo\n\n", "two"},
		{`{"level":"warn","msg":"failed to verify flags","error":"--initial-advertise-peer-urls \"unix://p\" must be \"host:port\""}` + "\n",
			`failed to verify flags: --initial-advertise-peer-urls "unix://p" must be "host:port"`},
		{`{"level":"info","msg":"started"}`, "started"},
		{strings.Repeat("x", 400), strings.Repeat("x", 300) + "..."},
	} {
		assert.Equal(t, tc.want, lastLine(tc.out), tc.out)
	}
}
