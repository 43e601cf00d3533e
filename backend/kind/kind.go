// Package kind is the kind backend: each Cluster is a kind cluster (Kubernetes in a Docker
// container), made with the sigs.k8s.io/kind library. It needs a Docker engine next to the
// operator.
//
// A Cluster's kind cluster is named after its UID, so a re-created Cluster of the same name never
// sees old data. The node image comes from the ProviderConfig (spec.kind.nodeImages, version →
// image). Creation takes tens of seconds: Ensure starts it in the background, reports Starting,
// and notifies when it is done. The control-plane node mounts a folder of the operator's state
// directory that holds the structured authentication configuration, so OIDC access works as on
// the local backend: SetJWTAuthenticators writes the file there and reads the API server's
// metric to see when it has loaded it.
package kind

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/authconfig"
)

// Name is the ProviderConfig spec.backend value of this backend.
const Name = "kind"

// Provider is the part of the kind library's *cluster.Provider this backend uses; tests give a
// fake.
type Provider interface {
	Create(name string, options ...kindcluster.CreateOption) error
	Delete(name, explicitKubeconfigPath string) error
	List() ([]string, error)
	KubeConfig(name string, internal bool) (string, error)
	ListNodes(name string) ([]nodes.Node, error)
}

// Options configure a Backend. Zero values take the defaults named.
type Options struct {
	// Provider makes kind clusters. Default: NewProvider, the kind library's with Docker, its
	// docker shim in <StateDir>/bin.
	Provider Provider
	// Create makes a kind cluster and waits until it is Ready. Default: Create with Provider.
	Create func(ctx context.Context, name string, o CreateOptions) error
	// StateDir holds a folder per Cluster (its authentication configuration). Required.
	StateDir string
	// NodeImage returns the node image of version for cl, for a Backend used without ForProfile (tests);
	// the operator binds it to each profile's ProviderConfig instead. Optional.
	NodeImage func(ctx context.Context, cl *clustersv1alpha1.Cluster, version string) (string, error)
	// Notify is told when a cluster's creation ends. Optional.
	Notify backend.Notify
	// CreateTimeout bounds one creation. Default 5 minutes.
	CreateTimeout time.Duration
	// Probe checks that the API server behind cfg serves. Default: GET /readyz.
	Probe func(ctx context.Context, cfg *rest.Config) error
	// Logger logs creations and deletions. Default: discard.
	Logger logr.Logger
}

// Backend runs a kind cluster per Cluster.
type Backend struct {
	opts Options

	mu       sync.Mutex
	creating map[types.UID]bool
	failed   map[types.UID]error
}

var (
	_ backend.Backend       = &Backend{}
	_ backend.Authenticator = &Backend{}
)

// New checks opts and returns a Backend.
func New(opts Options) (*Backend, error) {
	switch {
	case opts.StateDir == "":
		return nil, errors.New("kind backend: --state-dir is empty")
	}
	dir, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, err
	}
	opts.StateDir = dir
	if opts.Provider == nil {
		opts.Provider = NewProvider(filepath.Join(opts.StateDir, "bin"))
	}
	if opts.Create == nil {
		p := opts.Provider
		opts.Create = func(ctx context.Context, name string, o CreateOptions) error { return Create(ctx, p, name, o) }
	}
	if opts.CreateTimeout <= 0 {
		opts.CreateTimeout = 5 * time.Minute
	}
	if opts.Probe == nil {
		opts.Probe = backend.ProbeReadyz
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	return &Backend{opts: opts, creating: map[types.UID]bool{}, failed: map[types.UID]error{}}, nil
}

// Name returns "kind".
func (b *Backend) Name() string { return Name }

// Versions is empty: a kind backend runs the versions each ProviderConfig has node images for
// (ForProfile).
func (b *Backend) Versions() []string { return nil }

// Bound is the Backend bound to one ProviderConfig: its node images.
type Bound struct {
	*Backend
	pcName string
	images map[string]string
}

// ForProfile returns the Backend bound to pc: it offers, and creates clusters from, pc's node
// images.
func (b *Backend) ForProfile(pc *providersv1alpha1.ProviderConfig) backend.Backend {
	v := &Bound{Backend: b, pcName: pc.Name, images: map[string]string{}}
	if pc.Spec.Kind != nil {
		for k, img := range pc.Spec.Kind.NodeImages {
			v.images[k] = img
		}
	}
	return v
}

// Versions are those the ProviderConfig has node images for, newest first.
func (v *Bound) Versions() []string { return backend.ImageVersions(v.images) }

// Ensure is Backend.Ensure with the bound node images.
func (v *Bound) Ensure(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want) (backend.State, error) {
	return v.Backend.ensure(ctx, cl, want, func(_ context.Context, _ *clustersv1alpha1.Cluster, version string) (string, error) {
		if image, ok := backend.ImageFor(v.images, version); ok {
			return image, nil
		}
		return "", backend.Errorf(backend.ReasonVersionNotSupported,
			"ProviderConfig %s has no node image for Kubernetes %s in spec.kind.nodeImages; add one (make kind-image builds one)", v.pcName, version)
	})
}

// ClusterName is the kind cluster of the Cluster with uid: "cp-" and the UID's first 20 hex
// digits (kind names its node containers after it, so it stays short).
func ClusterName(uid types.UID) string {
	s := strings.ReplaceAll(string(uid), "-", "")
	if len(s) > 20 {
		s = s[:20]
	}
	return "cp-" + strings.ToLower(s)
}

// Ensure starts the creation of cl's kind cluster if it does not exist, and returns what it
// observes. It never waits for a creation.
//
// The version a kind cluster runs is recorded in its folder when it is created (kind clusters
// made before the record are recorded from their API server's answer). kind cannot change a
// node's version: every change is refused, and the cluster keeps running.
func (b *Backend) Ensure(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want) (backend.State, error) {
	if b.opts.NodeImage == nil {
		return backend.State{}, fmt.Errorf("the kind backend is used without node images for %s: bind it to its profile's ProviderConfig (ForProfile)", backend.RefOf(cl))
	}
	return b.ensure(ctx, cl, want, b.opts.NodeImage)
}

// ensure is Ensure with the node images of nodeImage.
func (b *Backend) ensure(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want,
	nodeImage func(context.Context, *clustersv1alpha1.Cluster, string) (string, error)) (backend.State, error) {
	name := ClusterName(cl.UID)
	b.mu.Lock()
	creating, failed := b.creating[cl.UID], b.failed[cl.UID]
	b.mu.Unlock()
	if creating {
		return backend.State{Reason: backend.ReasonStarting, RetryAfter: 10 * time.Second,
			Message: fmt.Sprintf("kind cluster %s is being created (tens of seconds)", name)}, nil
	}
	exists, err := b.exists(name)
	if err != nil {
		return backend.State{}, err
	}
	if !exists {
		if failed != nil {
			b.mu.Lock()
			delete(b.failed, cl.UID)
			b.mu.Unlock()
			return backend.State{}, fmt.Errorf("creating kind cluster %s failed: %w; retrying", name, failed)
		}
		version, _, err := backend.Resolve("", want)
		if err != nil {
			return backend.State{}, err
		}
		image, err := nodeImage(ctx, cl, version)
		if err != nil {
			return backend.State{}, err
		}
		if err := b.startCreate(cl, name, image, version); err != nil {
			return backend.State{}, err
		}
		return backend.State{Reason: backend.ReasonStarting, RetryAfter: 10 * time.Second,
			Message: fmt.Sprintf("creating kind cluster %s with node image %s", name, image)}, nil
	}
	s, err := b.observe(ctx, cl, name)
	if err != nil {
		return s, err
	}
	return s, b.versionOf(cl, want, &s)
}

// versionFile records, in a cluster's folder, the Kubernetes version its node image runs.
const versionFile = "version"

// versionOf fills s.Runs from the cluster's record (made from the API server's answer where it is
// missing) and refuses any change of version.
func (b *Backend) versionOf(cl *clustersv1alpha1.Cluster, want backend.Want, s *backend.State) error {
	path := filepath.Join(b.opts.StateDir, string(cl.UID), versionFile)
	data, err := os.ReadFile(path)
	running := backend.Normalize(string(data))
	switch {
	case errors.Is(err, os.ErrNotExist) && s.Version != "":
		running = s.Version
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(running), 0o600); err != nil {
			return fmt.Errorf("recording the version of kind cluster %s: %w", ClusterName(cl.UID), err)
		}
	case errors.Is(err, os.ErrNotExist):
		return nil // made before the record: known once its API server answers
	case err != nil:
		return fmt.Errorf("reading the recorded version of kind cluster %s: %w", ClusterName(cl.UID), err)
	}
	s.Runs = running
	if _, change, _ := backend.Resolve(running, want); change != nil {
		if !change.Refused {
			change = backend.Refuse(running, change.To, fmt.Sprintf(
				"change from %s to %s is refused: kind cannot change the Kubernetes version of a cluster's node, and the cluster keeps running %s; create a new Cluster with spec.kubernetes.version %s and move the workloads, or set spec.kubernetes.version back to %s",
				running, change.To, running, change.To, running))
		}
		s.VersionChange = change
	}
	return nil
}

// observe reads the endpoints and CA of an existing kind cluster and probes its API server.
func (b *Backend) observe(ctx context.Context, cl *clustersv1alpha1.Cluster, name string) (backend.State, error) {
	external, err := b.restConfig(name, false)
	if err != nil {
		return backend.State{}, err
	}
	internal, err := b.restConfig(name, true)
	if err != nil {
		return backend.State{}, err
	}
	s := backend.State{
		Endpoint:  external.Host,
		Endpoints: map[string]string{backend.EndpointAPIServerExternal: external.Host, clustersv1alpha1.APIServerEndpointInternal: internal.Host},
		CABundle:  external.CAData,
		Info:      fmt.Sprintf("kind %s", name),
		ProviderStatus: map[string]string{
			"backend": Name, "kindCluster": name,
		},
	}
	if err := b.opts.Probe(ctx, external); err != nil {
		s.Reason, s.Message, s.RetryAfter = backend.ReasonStarting, fmt.Sprintf("the API server of kind cluster %s does not serve yet: %v", name, err), 5*time.Second
		return s, nil
	}
	s.Ready, s.Reason, s.Message = true, backend.ReasonRunning, fmt.Sprintf("kind cluster %s serves on %s", name, external.Host)
	if v, err := backend.ServerVersion(ctx, external); err == nil {
		s.Version = v
	}
	return s, nil
}

func (b *Backend) exists(name string) (bool, error) {
	names, err := b.opts.Provider.List()
	if err != nil {
		return false, fmt.Errorf("listing kind clusters: %w", err)
	}
	return slices.Contains(names, name), nil
}

// startCreate writes the cluster's authentication configuration and creates the kind cluster in
// the background; when it ends, Notify is told.
func (b *Backend) startCreate(cl *clustersv1alpha1.Cluster, name, image, version string) error {
	authDir := b.authDir(cl.UID)
	if err := os.MkdirAll(authDir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.opts.StateDir, string(cl.UID), versionFile), []byte(version), 0o600); err != nil {
		return fmt.Errorf("recording the version of kind cluster %s: %w", name, err)
	}
	path := filepath.Join(authDir, authconfig.FileName)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := authconfig.WriteFile(path, nil); err != nil {
			return err
		}
	}
	b.mu.Lock()
	b.creating[cl.UID] = true
	b.mu.Unlock()
	ref := backend.RefOf(cl)
	go func() {
		log := b.opts.Logger.WithValues("cluster", ref.String(), "kindCluster", name, "image", image)
		log.Info("Creating a kind cluster")
		start := time.Now()
		err := b.opts.Create(context.Background(), name, CreateOptions{
			Image:          image,
			Config:         clusterConfig(authDir),
			KubeconfigPath: filepath.Join(b.opts.StateDir, string(cl.UID), "kubeconfig"),
			Timeout:        b.opts.CreateTimeout,
		})
		b.mu.Lock()
		delete(b.creating, cl.UID)
		if err != nil {
			b.failed[cl.UID] = err
		}
		b.mu.Unlock()
		if err != nil {
			log.Error(err, "Creating the kind cluster failed")
		} else {
			log.Info("Created the kind cluster", "took", time.Since(start).Round(time.Millisecond).String())
		}
		if b.opts.Notify != nil {
			b.opts.Notify(ref)
		}
	}()
	return nil
}

// Delete deletes cl's kind cluster and its folder.
func (b *Backend) Delete(_ context.Context, cl *clustersv1alpha1.Cluster) (bool, error) {
	b.mu.Lock()
	creating := b.creating[cl.UID]
	b.mu.Unlock()
	if creating {
		return false, nil // deleted once the creation has ended
	}
	name := ClusterName(cl.UID)
	if err := b.opts.Provider.Delete(name, filepath.Join(b.opts.StateDir, string(cl.UID), "kubeconfig")); err != nil {
		return false, fmt.Errorf("deleting kind cluster %s: %w", name, err)
	}
	if err := os.RemoveAll(filepath.Join(b.opts.StateDir, string(cl.UID))); err != nil {
		return false, err
	}
	return true, nil
}

// AdminConfig returns the kind cluster's admin rest.Config (external endpoint).
func (b *Backend) AdminConfig(_ context.Context, cl *clustersv1alpha1.Cluster) (*rest.Config, error) {
	return b.restConfig(ClusterName(cl.UID), false)
}

// SetJWTAuthenticators writes jwt into the authentication configuration the control-plane node
// mounts, and reports whether its API server runs with it.
func (b *Backend) SetJWTAuthenticators(ctx context.Context, cl *clustersv1alpha1.Cluster, jwt []apiserverv1.JWTAuthenticator) (bool, error) {
	data, err := authconfig.Render(jwt)
	if err != nil {
		return false, err
	}
	path := filepath.Join(b.authDir(cl.UID), authconfig.FileName)
	if _, err := authconfig.WriteIfChanged(path, data); err != nil {
		return false, err
	}
	cfg, err := b.restConfig(ClusterName(cl.UID), false)
	if err != nil {
		return false, err
	}
	return authconfig.AppliedAt(ctx, cfg, data)
}

func (b *Backend) authDir(uid types.UID) string {
	return filepath.Join(b.opts.StateDir, string(uid), "authn")
}

func (b *Backend) restConfig(name string, internal bool) (*rest.Config, error) {
	kubeconfig, err := b.opts.Provider.KubeConfig(name, internal)
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig of kind cluster %s: %w", name, err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig of kind cluster %s: %w", name, err)
	}
	return cfg, nil
}
