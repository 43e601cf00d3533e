package kind

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRewriteDockerArgs(t *testing.T) {
	unpriv := strings.Join(unprivilegedRunFlags, " ")
	tests := map[string]struct{ in, want string }{
		// What kind's docker provider runs (provision.go), shortened.
		"run": {
			in:   "run --name n --hostname n --label a=b --privileged --security-opt seccomp=unconfined --tmpfs /tmp --volume /var -e KIND_EXPERIMENTAL_CONTAINERD_SNAPSHOTTER --detach --tty --cgroupns=private img",
			want: "run --name n --hostname n --label a=b " + unpriv + " --security-opt seccomp=unconfined --tmpfs /tmp --volume /var -e KIND_EXPERIMENTAL_CONTAINERD_SNAPSHOTTER --detach --tty --cgroupns=private img",
		},
		// node.go: exec --privileged [-i] [-e ENV] container command args.
		"exec":           {in: "exec --privileged -i -e A=B node cat /etc/kubernetes/admin.conf", want: "exec -i -e A=B node cat /etc/kubernetes/admin.conf"},
		"exec, no stdin": {in: "exec --privileged node kubeadm init", want: "exec node kubeadm init"},
		// The command inside the container is never changed.
		"command keeps its flags": {in: "exec --privileged node sh -c --privileged", want: "exec node sh -c --privileged"},
		"run command":             {in: "run --rm img --privileged", want: "run --rm img --privileged"},
		// A value that looks like the flag stays a value.
		"value":  {in: "run --label --privileged img", want: "run --label --privileged img"},
		"=true":  {in: "run --privileged=true img", want: "run " + unpriv + " img"},
		"others": {in: "inspect --privileged x", want: "inspect --privileged x"},
		"empty":  {in: "", want: ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tt.want, strings.Join(rewriteDockerArgs(strings.Fields(tt.in)), " "))
		})
	}
}

func TestCNIConfig(t *testing.T) {
	data, err := cniConfig("10.244.1.0/24", 1400)
	require.NoError(t, err)
	var conf struct {
		CNIVersion string `json:"cniVersion"`
		Plugins    []struct {
			Type string `json:"type"`
			MTU  int    `json:"mtu"`
			IPAM struct {
				Type   string                `json:"type"`
				Ranges [][]map[string]string `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	require.NoError(t, json.Unmarshal(data, &conf))
	assert.Equal(t, "1.0.0", conf.CNIVersion)
	require.Len(t, conf.Plugins, 2)
	assert.Equal(t, "ptp", conf.Plugins[0].Type)
	assert.Equal(t, 1400, conf.Plugins[0].MTU)
	assert.Equal(t, "host-local", conf.Plugins[0].IPAM.Type)
	assert.Equal(t, "10.244.1.0/24", conf.Plugins[0].IPAM.Ranges[0][0]["subnet"])
	assert.Equal(t, "portmap", conf.Plugins[1].Type)
}

// TestCreateDeletesWhenTheNetworkFails: a cluster kind made but whose nodes never get a network
// (here: the fake cluster's kubeconfig cannot be used) is deleted, and the error says why.
func TestCreateDeletesWhenTheNetworkFails(t *testing.T) {
	f := &fakeProvider{release: make(chan struct{})}
	close(f.release)
	err := Create(t.Context(), f, "broken", CreateOptions{Image: "img", Timeout: 500 * time.Millisecond})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kind cluster broken")
	assert.Equal(t, []string{"broken"}, f.creates)
	assert.Equal(t, []string{"broken"}, f.deletes, "the half-made cluster is deleted")
}
