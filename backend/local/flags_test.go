package local

import (
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flagMap maps each --name=value flag of args to its value; a flag given twice fails the test.
func flagMap(t *testing.T, args []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, a := range args {
		require.True(t, strings.HasPrefix(a, "--"), "argument %q is a --flag", a)
		name, value, ok := strings.Cut(a, "=")
		require.True(t, ok, "flag %q has a value", a)
		_, dup := m[name]
		require.False(t, dup, "flag %s given twice", name)
		m[name] = value
	}
	return m
}

func TestEtcdArgs(t *testing.T) {
	for _, dir := range []string{"/var/lib/cp/uid-1", "/tmp/state/3f2a"} {
		t.Run(dir, func(t *testing.T) {
			args := etcdArgs(dir, DefaultEtcdQuota)
			for _, a := range args {
				assert.NotContains(t, a, "unsafe-no-fsync", "fsync stays on")
				assert.NotContains(t, a, "http", "no TCP listener")
			}
			f := flagMap(t, args)
			assert.Equal(t, filepath.Join(dir, "etcd"), f["--data-dir"])
			assert.True(t, strings.HasPrefix(f["--data-dir"], dir+string(filepath.Separator)), "the data is in the cluster's folder")

			// Client and peer listen on unix sockets named relative to the cluster's folder, etcd's
			// working directory.
			assert.Equal(t, "unix://etcd.sock:0", f["--listen-client-urls"])
			assert.Equal(t, "unix://etcd.sock:0", f["--advertise-client-urls"])
			assert.Equal(t, "unix://etcd-peer.sock:0", f["--listen-peer-urls"])
			assert.Equal(t, "unix://etcd-peer.sock:0", f["--initial-advertise-peer-urls"])
			assert.Equal(t, "default=unix://etcd-peer.sock:0", f["--initial-cluster"])
			assert.Equal(t, "default", f["--name"])
			assert.Empty(t, f["--listen-metrics-urls"], "no metrics listener")
			_, clientAuth := f["--client-cert-auth"]
			assert.False(t, clientAuth, "the folder's permissions guard the socket")
		})
	}
}

func TestControllerManagerArgs(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tuning     Tuning
		wantSyncs  string
		wantNSyncs int
	}{
		{"default tuning", DefaultTuning, "", 0},
		{"concurrency 2", Tuning{ConcurrentSyncs: 2}, "2", len(kcmConcurrencyFlags)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := "/state/uid-7"
			f := flagMap(t, controllerManagerArgs(dir, "198.18.0.0/16", ports{APIServer: 41234, ControllerManager: 41240}, tc.tuning))
			for _, k := range []string{"--kubeconfig", "--authentication-kubeconfig", "--authorization-kubeconfig"} {
				assert.Equal(t, "/state/uid-7/kube-controller-manager.kubeconfig", f[k], k)
			}
			assert.Equal(t, "true", f["--use-service-account-credentials"])
			assert.Equal(t, "/state/uid-7/pki/ca-bundle.crt", f["--root-ca-file"])
			assert.Equal(t, "/state/uid-7/pki/ca.crt", f["--cluster-signing-cert-file"])
			assert.Equal(t, "/state/uid-7/pki/ca.key", f["--cluster-signing-key-file"])
			assert.Equal(t, "/state/uid-7/pki/sa.key", f["--service-account-private-key-file"])
			assert.Equal(t, "false", f["--leader-elect"])
			assert.Equal(t, "100", f["--kube-api-qps"], "its forty controllers' clients start without client-side throttling")
			assert.Equal(t, "127.0.0.1", f["--bind-address"], "health and metrics on the loopback only")
			assert.Equal(t, "41240", f["--secure-port"])
			assert.Equal(t, "/state/uid-7/pki/kube-controller-manager-serving.crt", f["--tls-cert-file"])
			assert.Equal(t, "198.18.0.0/16", f["--service-cluster-ip-range"])

			controllers := strings.Split(f["--controllers"], ",")
			assert.Equal(t, "*", controllers[0], "every default controller")
			for _, c := range []string{"bootstrap-signer-controller", "token-cleaner-controller"} {
				assert.Contains(t, controllers, c, "enabled as in a workerless Gardener shoot")
			}
			for _, c := range []string{"node-lifecycle-controller", "node-ipam-controller", "persistentvolume-attach-detach-controller",
				"persistentvolume-binder-controller", "persistentvolume-expander-controller", "ttl-controller", "taint-eviction-controller"} {
				assert.Contains(t, controllers, "-"+c, "a controller that serves only nodes is off")
			}
			for _, c := range []string{"clusterrole-aggregation-controller", "namespace-controller", "garbage-collector-controller"} {
				assert.NotContains(t, controllers, "-"+c)
			}

			syncs := 0
			for name, v := range f {
				if strings.HasPrefix(name, "--concurrent-") {
					syncs++
					assert.Equal(t, tc.wantSyncs, v, name)
				}
			}
			assert.Equal(t, tc.wantNSyncs, syncs)
		})
	}
}

func TestAPIServerArgs(t *testing.T) {
	for _, tc := range []struct {
		name          string
		advertiseHost string
		wantBind      string
		wantAdvertise string
		tuning        Tuning
		wantEndpoints string
	}{
		{"loopback", "127.0.0.1", "127.0.0.1", "127.0.0.1", DefaultTuning, "none"},
		{"localhost", "localhost", "127.0.0.1", "127.0.0.1", Tuning{WatchCache: true}, "none"},
		{"LAN IP", "10.1.2.3", "0.0.0.0", "10.1.2.3", DefaultTuning, "lease"},
		{"DNS name", "cp.example.com", "0.0.0.0", "127.0.0.1", DefaultTuning, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := "/state/uid-7"
			p := ports{APIServer: 41233, Internal: 41234, ControllerManager: 41235}
			f := flagMap(t, apiServerArgs(dir, tc.advertiseHost, "198.18.0.0/16", p, tc.tuning, true))

			assert.Equal(t, "RBAC", f["--authorization-mode"])
			assert.Equal(t, "/state/uid-7/authn.yaml", f["--authentication-config"])
			assert.Equal(t, "https://kubernetes.default.svc.cluster.local", f["--service-account-issuer"])
			assert.NotContains(t, f["--service-account-issuer"], "41234", "the issuer does not name the port")
			assert.Equal(t, "/state/uid-7/pki/sa.key", f["--service-account-signing-key-file"])
			assert.Equal(t, "/state/uid-7/pki/sa.pub", f["--service-account-key-file"])
			assert.Equal(t, "41234", f["--secure-port"], "its own port: the endpoint's (41233) is the front door's")
			assert.Equal(t, "unix://etcd.sock:0", f["--etcd-servers"], "etcd's socket, relative to the cluster's folder")
			assert.Equal(t, "/state/uid-7/pki/apiserver.crt", f["--tls-cert-file"])
			assert.Equal(t, "/state/uid-7/pki/apiserver.key", f["--tls-private-key-file"])
			assert.Equal(t, "/state/uid-7/pki/ca-bundle.crt", f["--client-ca-file"])
			assert.Equal(t, "198.18.0.0/16", f["--service-cluster-ip-range"])
			assert.Equal(t, tc.wantBind, f["--bind-address"])
			assert.Equal(t, tc.wantAdvertise, f["--advertise-address"])
			assert.Equal(t, tc.wantEndpoints, f["--endpoint-reconciler-type"], "the kubernetes Service's endpoints")
			assert.Equal(t, strconv.FormatBool(tc.tuning.WatchCache), f["--watch-cache"])
			assert.Equal(t, "false", f["--profiling"])
			assert.Equal(t, "true", f["--enable-priority-and-fairness"], "one client cannot starve the others")
			assert.Equal(t, "80", f["--max-requests-inflight"])
			assert.Equal(t, "40", f["--max-mutating-requests-inflight"])
			_, insecure := f["--insecure-port"]
			assert.False(t, insecure)
		})
	}
}

func TestBindAddress(t *testing.T) {
	for _, tc := range []struct {
		host, want string
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"localhost", "127.0.0.1"},
		// A loopback advertise host binds that address (the endpoint names it); localhost binds 127.0.0.1.
		{"::1", "::1"},
		{"127.0.0.2", "127.0.0.2"},
		{"10.1.2.3", "0.0.0.0"},
		{"192.168.0.10", "0.0.0.0"},
		{"fd00::1", "0.0.0.0"},
		{"cp.example.com", "0.0.0.0"},
		{"0.0.0.0", "0.0.0.0"},
	} {
		t.Run(tc.host, func(t *testing.T) {
			assert.Equal(t, tc.want, bindAddress(tc.host))
		})
	}
}

func TestTuningEnv(t *testing.T) {
	for _, tc := range []struct {
		name           string
		tuning         Tuning
		memLimit, gogc string
		want           []string
	}{
		{"nothing", Tuning{}, "", "", nil},
		{"memory limit only", Tuning{}, "150MiB", "", []string{"GOMEMLIMIT=150MiB"}},
		{"GOGC only", Tuning{GOGC: "50"}, "", "", []string{"GOGC=50"}},
		{"both", Tuning{GOGC: "75"}, "48MiB", "", []string{"GOMEMLIMIT=48MiB", "GOGC=75"}},
		{"a process's own GOGC wins", Tuning{GOGC: "75"}, "48MiB", "200", []string{"GOMEMLIMIT=48MiB", "GOGC=200"}},
		{"a process's own GOGC without a common one", Tuning{}, "", "200", []string{"GOGC=200"}},
		{"default API server", DefaultTuning, DefaultTuning.APIServerGOMEMLIMIT, DefaultTuning.APIServerGOGC, []string{"GOMEMLIMIT=150MiB", "GOGC=200"}},
		{"default etcd", DefaultTuning, DefaultTuning.EtcdGOMEMLIMIT, "", []string{"GOMEMLIMIT=48MiB", "GOGC=50"}},
		{"default controller manager", DefaultTuning, DefaultTuning.ControllerManagerGOMEMLIMIT, "", []string{"GOMEMLIMIT=64MiB", "GOGC=50"}},
		{"watch cache adds nothing", Tuning{WatchCache: true}, "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.tuning.env(tc.memLimit, tc.gogc))
		})
	}
}

func TestEndpoint(t *testing.T) {
	for _, tc := range []struct {
		host string
		port int
		want string
	}{
		{"127.0.0.1", 6443, "https://127.0.0.1:6443"},
		{"localhost", 41000, "https://localhost:41000"},
		{"cp.example.com", 443, "https://cp.example.com:443"},
		{"::1", 6443, "https://[::1]:6443"},
		{"fd00::5", 40001, "https://[fd00::5]:40001"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			got := endpoint(tc.host, tc.port)
			assert.Equal(t, tc.want, got)
			u, err := url.Parse(got)
			require.NoError(t, err)
			assert.Equal(t, tc.host, u.Hostname())
			assert.Equal(t, strconv.Itoa(tc.port), u.Port())
		})
	}
}

func TestValidServiceCIDR(t *testing.T) {
	for _, tc := range []struct {
		cidr    string
		wantErr string
	}{
		{cidr: DefaultServiceCIDR},
		{cidr: LegacyServiceCIDR},
		{cidr: "10.96.0.0/12"},
		{cidr: "192.168.7.0/29"},
		{cidr: "fd00:10:96::/108"},
		{cidr: "fd00:10:96::/112"},
		{cidr: "", wantErr: "not a CIDR"},
		{cidr: "198.18.0.1", wantErr: "not a CIDR"},
		{cidr: "198.18.0.1/16", wantErr: "host bits set: write 198.18.0.0/16"},
		{cidr: "10.0.0.0/8", wantErr: "from /12 to /29"},
		{cidr: "10.0.0.0/30", wantErr: "from /12 to /29"},
		{cidr: "fd00::/64", wantErr: "from /108 to /125"},
	} {
		t.Run(tc.cidr, func(t *testing.T) {
			err := ValidServiceCIDR(tc.cidr)
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestKubernetesServiceIP(t *testing.T) {
	for cidr, want := range map[string]string{
		DefaultServiceCIDR: "198.18.0.1",
		LegacyServiceCIDR:  "10.96.0.1",
		"fd00:10:96::/108": "fd00:10:96::1",
	} {
		assert.Equal(t, want, kubernetesServiceIP(cidr).String(), cidr)
	}
}
