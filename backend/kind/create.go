package kind

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
)

// CreateOptions are what Create needs besides the cluster's name.
type CreateOptions struct {
	// Image is the node image (hack/kind-image.sh makes one offline).
	Image string
	// Config is the kind configuration; Create sets its networking as nodes made offline need.
	// Nil: one control-plane node.
	Config *v1alpha4.Cluster
	// KubeconfigPath is where kind writes the admin kubeconfig (kind merges it into an existing file).
	KubeconfigPath string
	// Timeout bounds the wait for Ready nodes after kind has made them.
	Timeout time.Duration
}

// OfflineNetworking sets what a cluster of an offline node image needs: no default CNI (kindnetd
// has no image; InstallNetwork configures ptp instead), and kube-proxy in nftables mode (its
// image carries nft, not the iptables wrappers).
func OfflineNetworking(cfg *v1alpha4.Cluster) {
	cfg.Networking.DisableDefaultCNI = true
	cfg.Networking.KubeProxyMode = v1alpha4.NFTablesProxyMode
}

// Create makes kind cluster name with p and waits until its nodes are Ready: kind makes the nodes
// (without waiting: they cannot be Ready before they have a network), then InstallNetwork. As
// kind does when it fails, a cluster whose network fails is deleted, so that a retry starts
// afresh; the error says why.
func Create(ctx context.Context, p Provider, name string, o CreateOptions) error {
	cfg := o.Config
	if cfg == nil {
		cfg = &v1alpha4.Cluster{TypeMeta: v1alpha4.TypeMeta{APIVersion: "kind.x-k8s.io/v1alpha4", Kind: "Cluster"}}
	}
	OfflineNetworking(cfg)
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	opts := []kindcluster.CreateOption{
		kindcluster.CreateWithV1Alpha4Config(cfg),
		kindcluster.CreateWithNodeImage(o.Image),
		kindcluster.CreateWithDisplayUsage(false), kindcluster.CreateWithDisplaySalutation(false),
	}
	if o.KubeconfigPath != "" {
		opts = append(opts, kindcluster.CreateWithKubeconfigPath(o.KubeconfigPath))
	}
	if err := p.Create(name, opts...); err != nil {
		return err
	}
	if err := InstallNetwork(ctx, p, name, o.Timeout); err != nil {
		if derr := p.Delete(name, o.KubeconfigPath); derr != nil {
			return fmt.Errorf("%w; deleting the cluster failed too: %v", err, derr)
		}
		return err
	}
	return nil
}
