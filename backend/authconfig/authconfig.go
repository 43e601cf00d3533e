// Package authconfig writes a cluster's structured authentication configuration
// (apiserver.config.k8s.io/v1 AuthenticationConfiguration) for the backends whose clusters trust
// OIDC issuers, and tells whether the cluster's kube-apiserver has loaded it. It knows nothing
// about controllers or about how a backend runs its clusters.
//
// kube-apiserver watches the file (--authentication-config) and reloads it on its own, but only
// once every issuer in it answers discovery; until then the old configuration serves. Its metric
// apiserver_authentication_config_controller_last_config_info carries the sha256 of the file
// content it runs with: Applied compares that with the content written.
package authconfig

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
	"time"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// FileName is the name of the configuration file in a cluster's folder.
const FileName = "authn.yaml"

// Empty is the configuration of a cluster that trusts no issuer: the file it starts with.
const Empty = `apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt: []
`

// configInfoMetric is the kube-apiserver metric whose hash label is the sha256 of the
// configuration it runs with.
const configInfoMetric = "apiserver_authentication_config_controller_last_config_info"

// metricsTimeout bounds one read of the API server's metrics.
const metricsTimeout = 5 * time.Second

// Render is the file content of a configuration that trusts jwt: Empty without issuers. The same
// jwt always renders the same bytes.
func Render(jwt []apiserverv1.JWTAuthenticator) ([]byte, error) {
	if len(jwt) == 0 {
		return []byte(Empty), nil
	}
	cfg := apiserverv1.AuthenticationConfiguration{JWT: jwt}
	cfg.APIVersion, cfg.Kind = apiserverv1.SchemeGroupVersion.String(), "AuthenticationConfiguration"
	return yaml.Marshal(cfg)
}

// WriteFile renders jwt into path.
func WriteFile(path string, jwt []apiserverv1.JWTAuthenticator) error {
	data, err := Render(jwt)
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, data, 0o600)
}

// WriteIfChanged writes data to path (atomically, mode 0600) unless it holds data already, and
// reports whether it wrote.
func WriteIfChanged(path string, data []byte) (bool, error) {
	cur, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return false, err
	}
	if bytes.Equal(cur, data) {
		return false, nil
	}
	if err := WriteFileAtomic(path, data, 0o600); err != nil {
		return false, fmt.Errorf("writing the authentication configuration: %w", err)
	}
	return true, nil
}

// AppliedAt is Applied for the API server of the admin config cfg.
func AppliedAt(ctx context.Context, cfg *rest.Config, data []byte) (bool, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return false, err
	}
	return Applied(ctx, hc, cfg.Host, data)
}

// Applied reports whether the API server at host, read through c (authenticated with the right to
// read /metrics), runs with the configuration data.
func Applied(ctx context.Context, c *http.Client, host string, data []byte) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, metricsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(host, "/")+"/metrics", nil)
	if err != nil {
		return false, err
	}
	resp, err := c.Do(req)
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

// WriteFileAtomic writes data to path through a temporary file in the same folder and a rename,
// so that a reader (or a crash) never sees a half-written file.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(perm)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
	}
	return werr
}
