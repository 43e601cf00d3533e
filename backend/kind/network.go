package kind

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
)

// kind's default CNI, kindnetd, is not on the Go module proxy, so clusters are made with
// disableDefaultCNI and this package gives each node what kindnetd would: a CNI configuration
// with the standard ptp and host-local plugins for the node's pod range (spec.podCIDR, allocated
// by kube-controller-manager), and a route to every other node's pod range via that node's
// address. The nodes share one Docker network, so a route is all pod-to-pod traffic between nodes
// needs.

// cniConfigPath is the file the kubelet's container runtime reads on every node.
const cniConfigPath = "/etc/cni/net.d/10-cluster-provider.conflist"

// cniConfig is the CNI configuration of a node with pod range podCIDR and network MTU mtu: pods
// get a veth pair to the node (ptp), an address of the range (host-local), masquerading for
// traffic that leaves the range, and hostPort support (portmap).
func cniConfig(podCIDR string, mtu int) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "cluster-provider",
		"plugins": []any{
			map[string]any{
				"type":   "ptp",
				"ipMasq": true,
				"mtu":    mtu,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": [][]map[string]string{{{"subnet": podCIDR}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// nodeNetwork is what a node needs to know of the others.
type nodeNetwork struct {
	name, podCIDR, address string
}

// InstallNetwork gives every node of kind cluster name its CNI configuration and routes, then
// waits until every node is Ready. It waits for kube-controller-manager to allocate the pod
// ranges first; timeout bounds the whole.
func InstallNetwork(ctx context.Context, p Provider, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	kubeconfig, err := p.KubeConfig(name, false)
	if err != nil {
		return fmt.Errorf("reading the kubeconfig of kind cluster %s: %w", name, err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	if err != nil {
		return fmt.Errorf("the kubeconfig of kind cluster %s: %w", name, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("the kubeconfig of kind cluster %s: %w", name, err)
	}
	kindNodes, err := p.ListNodes(name)
	if err != nil {
		return fmt.Errorf("listing the nodes of kind cluster %s: %w", name, err)
	}
	var nets []nodeNetwork
	var lastErr error
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		nets, lastErr = podRanges(ctx, cs, kindNodes)
		return lastErr == nil, nil
	})
	if err != nil {
		return fmt.Errorf("kind cluster %s: the nodes have no pod ranges: %w", name, lastErr)
	}
	for _, n := range kindNodes {
		if err := configureNode(ctx, n, nets); err != nil {
			return fmt.Errorf("kind cluster %s: node %s: %w", name, n, err)
		}
	}
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		lastErr = nodesReady(ctx, cs, len(kindNodes))
		return lastErr == nil, nil
	})
	if err != nil {
		return fmt.Errorf("kind cluster %s: nodes not Ready: %w", name, lastErr)
	}
	return nil
}

// podRanges returns each kind node's pod range and address, or an error naming what is missing.
func podRanges(ctx context.Context, cs kubernetes.Interface, kindNodes []nodes.Node) ([]nodeNetwork, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	byName := map[string]corev1.Node{}
	for _, n := range list.Items {
		byName[n.Name] = n
	}
	var nets []nodeNetwork
	for _, kn := range kindNodes {
		n, ok := byName[kn.String()]
		switch {
		case !ok:
			return nil, fmt.Errorf("node %s has not registered", kn)
		case n.Spec.PodCIDR == "":
			return nil, fmt.Errorf("node %s has no spec.podCIDR yet", kn)
		}
		address := ""
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && !strings.Contains(a.Address, ":") {
				address = a.Address
			}
		}
		if address == "" {
			return nil, fmt.Errorf("node %s has no IPv4 InternalIP", kn)
		}
		nets = append(nets, nodeNetwork{name: kn.String(), podCIDR: n.Spec.PodCIDR, address: address})
	}
	return nets, nil
}

// configureNode writes n's CNI configuration and its routes to the other nodes' pod ranges.
func configureNode(ctx context.Context, n nodes.Node, nets []nodeNetwork) error {
	var mtuOut bytes.Buffer
	if err := n.CommandContext(ctx, "cat", "/sys/class/net/eth0/mtu").SetStdout(&mtuOut).Run(); err != nil {
		return fmt.Errorf("reading the MTU of eth0: %w", err)
	}
	var mtu int
	if _, err := fmt.Sscan(mtuOut.String(), &mtu); err != nil {
		return fmt.Errorf("the MTU of eth0 %q: %w", mtuOut.String(), err)
	}
	for _, other := range nets {
		if other.name == n.String() {
			conf, err := cniConfig(other.podCIDR, mtu)
			if err != nil {
				return err
			}
			// Written aside and renamed: the runtime never reads half a file.
			script := fmt.Sprintf("mkdir -p /etc/cni/net.d && cat > %[1]s.tmp && mv %[1]s.tmp %[1]s", cniConfigPath)
			if err := n.CommandContext(ctx, "sh", "-c", script).SetStdin(bytes.NewReader(conf)).Run(); err != nil {
				return fmt.Errorf("writing %s: %w", cniConfigPath, err)
			}
			continue
		}
		if err := n.CommandContext(ctx, "ip", "route", "replace", other.podCIDR, "via", other.address).Run(); err != nil {
			return fmt.Errorf("routing %s via %s: %w", other.podCIDR, other.address, err)
		}
	}
	return nil
}

// nodesReady is nil once want nodes are registered and Ready.
func nodesReady(ctx context.Context, cs kubernetes.Interface, want int) error {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	if len(list.Items) < want {
		return fmt.Errorf("%d of %d nodes registered", len(list.Items), want)
	}
	for _, n := range list.Items {
		ready := false
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = c.Status == corev1.ConditionTrue
				if !ready {
					return fmt.Errorf("node %s is not Ready: %s", n.Name, c.Message)
				}
			}
		}
		if !ready {
			return fmt.Errorf("node %s has no Ready condition yet", n.Name)
		}
	}
	return nil
}
