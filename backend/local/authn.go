package local

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

var _ backend.Authenticator = &Backend{}

// configInfoMetric is the kube-apiserver metric whose hash label is the sha256 of the
// authentication configuration file it runs with.
const configInfoMetric = "apiserver_authentication_config_controller_last_config_info"

// SetJWTAuthenticators writes jwt into the cluster's authentication configuration file (atomically)
// if it differs, and reports whether the API server runs with it: its configInfoMetric carries
// the hash of the file's content once it has reloaded it.
func (b *Backend) SetJWTAuthenticators(ctx context.Context, cl *clustersv1alpha1.Cluster, jwt []apiserverv1.JWTAuthenticator) (bool, error) {
	b.mu.Lock()
	in := b.instances[cl.UID]
	b.mu.Unlock()
	if in == nil {
		return false, fmt.Errorf("the local cluster of %s/%s does not run", cl.Namespace, cl.Name)
	}
	data, err := renderAuthConfig(jwt)
	if err != nil {
		return false, err
	}
	path := filepath.Join(in.dir, authConfigFile)
	in.authMu.Lock()
	defer in.authMu.Unlock()
	cur, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return false, err
	}
	if !bytes.Equal(cur, data) {
		if err := writeFileAtomic(path, data, 0o600); err != nil {
			return false, fmt.Errorf("writing the authentication configuration: %w", err)
		}
		in.log.Info("Wrote the authentication configuration", "issuers", len(jwt))
	}
	return in.runsAuthConfig(ctx, data)
}

// renderAuthConfig is the file content of an AuthenticationConfiguration with jwt.
func renderAuthConfig(jwt []apiserverv1.JWTAuthenticator) ([]byte, error) {
	if len(jwt) == 0 {
		return []byte(emptyAuthConfig), nil
	}
	cfg := apiserverv1.AuthenticationConfiguration{JWT: jwt}
	cfg.APIVersion, cfg.Kind = apiserverv1.SchemeGroupVersion.String(), "AuthenticationConfiguration"
	return yaml.Marshal(cfg)
}

// runsAuthConfig reports whether the API server's configInfoMetric names the hash of data.
func (in *instance) runsAuthConfig(ctx context.Context, data []byte) (bool, error) {
	in.mu.Lock()
	url := endpoint(in.b.opts.AdvertiseHost, in.meta.Ports.APIServer) + "/metrics"
	in.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := in.probe.Do(req)
	if err != nil {
		return false, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("reading the API server's metrics: %s", resp.Status)
	}
	want := fmt.Sprintf(`hash="sha256:%x"`, sha256.Sum256(data))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, configInfoMetric+"{") && strings.Contains(line, want) {
			return true, nil
		}
	}
	return false, sc.Err()
}
