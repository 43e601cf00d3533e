package local

import (
	"context"
	"fmt"
	"path/filepath"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/authconfig"
)

var _ backend.Authenticator = &Backend{}

// SetJWTAuthenticators writes jwt into the cluster's authentication configuration file if it
// differs, and reports whether the API server runs with it.
func (b *Backend) SetJWTAuthenticators(ctx context.Context, cl *clustersv1alpha1.Cluster, jwt []apiserverv1.JWTAuthenticator) (bool, error) {
	b.mu.Lock()
	in := b.instances[cl.UID]
	b.mu.Unlock()
	if in == nil {
		return false, fmt.Errorf("the local cluster of %s/%s does not run", cl.Namespace, cl.Name)
	}
	data, err := authconfig.Render(jwt)
	if err != nil {
		return false, err
	}
	in.authMu.Lock()
	defer in.authMu.Unlock()
	wrote, err := authconfig.WriteIfChanged(filepath.Join(in.dir, authConfigFile), data)
	if err != nil {
		return false, err
	}
	if wrote {
		in.logger().Info("Wrote the authentication configuration", "issuers", len(jwt))
	}
	// A hibernated cluster reads the file when it wakes; the answer needs it to serve.
	if err := in.b.wakeFor(ctx, in); err != nil {
		return false, err
	}
	return authconfig.Applied(ctx, in.probe, in.apiURL(), data)
}
