package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	apischeme "github.com/openmcp-local/cluster-provider/api/scheme"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/hosted"
	"github.com/openmcp-local/cluster-provider/backend/kind"
	"github.com/openmcp-local/cluster-provider/backend/local"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/labeller"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
	"github.com/openmcp-local/cluster-provider/controllers/scheduler"
	"github.com/openmcp-local/cluster-provider/manager"
	"github.com/openmcp-local/cluster-provider/providerconfig"
)

// Event reporters (the events.k8s.io reportingController) of the controllers wired here; the
// labeller names its own (labeller.ControllerName).
const (
	reporterProviderConfig = "providerconfig"
	reporterProfile        = "cluster-provider"
)

// readyzCacheTimeout bounds how long one /readyz request waits for the cache to sync.
const readyzCacheTimeout = 500 * time.Millisecond

// restConfig loads the kubeconfig at path, or else the usual places ($KUBECONFIG, in-cluster,
// ~/.kube/config). Client-side rate limiting is off, as with ctrl.GetConfig: the API server's
// priority and fairness does that job.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, fmt.Errorf("loading the kubeconfig (set --kubeconfig or KUBECONFIG): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
	}
	if cfg.QPS == 0 {
		cfg.QPS = -1
	}
	return cfg, nil
}

// metricsOptions serves the metrics as --metrics-bind-address and --metrics-secure say: with
// --metrics-secure over HTTPS (a self-signed certificate made at start), and only to clients the
// platform's API server authenticates (TokenReview) and authorizes for GET /metrics
// (SubjectAccessReview), as openMCP's own operator serves them.
func metricsOptions(o *runOptions) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.MetricsBindAddress, SecureServing: o.MetricsSecure}
	if o.MetricsSecure {
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return opts
}

// The metrics filter of --metrics-secure:
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Leader election's recorder writes core/v1 Events:
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
//
// The leader election Lease is not in the generated ClusterRole: deploy/rbac grants it by a Role in
// the operator's namespace only (leader_election_role.yaml). The CRD writes of `init` are not
// either: its own ClusterRole (deploy/rbac/init_role.yaml) grants them, and `run` needs none.

// newOperator builds the manager of `run`: the engine that runs each ClusterProfile's
// controllers, the ProviderConfig controller, the AccessRequest labeller and the ClusterRequest
// scheduler as enabled, and the health checks. Nothing runs until the manager starts.
func newOperator(ctx context.Context, o *runOptions, c *Config, bins []local.Binaries, log logr.Logger) (ctrl.Manager, error) {
	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	var lock resourcelock.Interface
	if o.LeaderElect {
		if lock, err = newLeaseLock(cfg, o, o.LeaderElectionNamespace); err != nil {
			return nil, err
		}
	}
	// Watches wait for a platform API server that refuses connections (waitForAPIServer); the
	// lease lock above keeps its own client, whose requests must fail fast.
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(waitForAPIServer(log.WithName("platform"), apiServerRetry))
	scheme := apischeme.New()
	watchSecrets, err := mayWatchSecrets(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if !watchSecrets {
		log.Info("Secrets are not watched: this identity may not list and watch them in every namespace (deploy/rbac grants neither). "+
			"A kubeconfig Secret that is edited or deleted is written again at the AccessRequest's next check", "grantCheck", o.GrantCheck.String())
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                              scheme,
		Logger:                              log,
		LeaderElection:                      o.LeaderElect,
		LeaderElectionResourceLockInterface: lock,
		LeaderElectionReleaseOnCancel:       true,
		LeaseDuration:                       &o.LeaseDuration,
		RenewDeadline:                       &o.RenewDeadline,
		RetryPeriod:                         &o.RetryPeriod,
		Metrics:                             metricsOptions(o),
		HealthProbeBindAddress:              o.HealthProbeBindAddress,
		Cache:                               profile.CacheOptions(watchSecrets),
		Client:                              profile.ClientOptions(watchSecrets),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}

	engine, err := profile.NewEngine(ctx, mgr.GetCache(), scheme, o.ProviderName,
		profile.Workers{Cluster: o.ClusterWorkers, AccessRequest: o.AccessRequestWorkers}, watchSecrets, log.WithName("engine"))
	if err != nil {
		return nil, fmt.Errorf("creating the controller engine: %w", err)
	}
	if err := mgr.Add(engine); err != nil {
		return nil, fmt.Errorf("adding the controller engine: %w", err)
	}

	backends, err := newBackends(mgr, engine, o, bins, log)
	if err != nil {
		return nil, err
	}
	if o.Enabled[controllerProviderConfig] {
		r := &providerconfig.Reconciler{
			Client:   mgr.GetClient(),
			Recorder: mgr.GetEventRecorder(reporterProviderConfig),
			Engine:   engine,
			Builder: &profile.Builder{
				Client:       mgr.GetClient(),
				Recorder:     mgr.GetEventRecorder(reporterProfile),
				ProviderName: o.ProviderName,
				Backends:     backends,
				Access: accessrequest.Options{
					Environment:   o.Environment,
					Namespace:     o.AccessNamespace,
					TokenValidity: o.TokenValidity,
					GrantCheck:    o.GrantCheck,
					SecretReader:  mgr.GetAPIReader(),
				},
			},
			Backends:     backends,
			ProviderName: o.ProviderName,
			Environment:  o.Environment,
		}
		if err := r.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("setting up the %s controller: %w", controllerProviderConfig, err)
		}
	}
	if o.Enabled[controllerAccessRequest] {
		selector, err := c.AccessRequestSelector()
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		r := &labeller.Reconciler{Selector: selector}
		if err := r.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("setting up the %s controller: %w", controllerAccessRequest, err)
		}
	}

	if o.Enabled[controllerScheduler] {
		r := &scheduler.Reconciler{Config: c.Scheduler}
		if err := r.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("setting up the %s controller: %w", controllerScheduler, err)
		}
	}

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("cache-synced", cacheSynced(mgr.GetCache())); err != nil {
		return nil, err
	}
	return mgr, nil
}

// newBackends builds the cluster backends: the local one when --local-binaries names folders, the
// kind one with --kind-backend. They run in the manager (leader only) and tell the engine when a
// cluster's state changes.
func newBackends(mgr ctrl.Manager, engine *manager.Engine, o *runOptions, bins []local.Binaries, log logr.Logger) (backend.Registry, error) {
	backends := backend.Registry{}
	notify := func(r backend.Ref) {
		engine.Enqueue(profile.KindCluster, r.Profile, reconcile.Request{NamespacedName: r.NamespacedName})
	}
	if o.KindBackend {
		kb, err := kind.New(kind.Options{
			StateDir: filepath.Join(o.StateDir, "kind"),
			Notify:   notify,
			Logger:   log.WithName("kind"),
		})
		if err != nil {
			return nil, err
		}
		backends[kind.Name] = kb
		log.Info("The kind backend runs Clusters of kind ProviderConfigs (it needs a Docker engine)")
	}
	if o.HostedBackend {
		hb, err := newHostedBackend(mgr, o, notify, log)
		if err != nil {
			return nil, err
		}
		backends[hosted.Name] = hb
		log.Info("The hosted backend runs the control planes of hosted ProviderConfigs as workloads")
	}
	if len(bins) == 0 {
		log.Info("No --local-binaries: the local backend is off; Clusters of local ProviderConfigs are not provisioned")
		return backends, nil
	}
	reader := mgr.GetAPIReader()
	// The object store's credentials (spec.backup.objectStore) are a Secret of the operator's
	// namespace: its pod's, or out of a pod the namespace of its Lease.
	secretNamespace := o.LeaderElectionNamespace
	if data, err := os.ReadFile(inClusterNamespaceFile); err == nil {
		secretNamespace = string(data)
	}
	lb, err := local.New(local.Options{
		ReadSecret: func(ctx context.Context, name string) (map[string][]byte, error) {
			if secretNamespace == "" {
				return nil, errors.New("the operator does not run in a pod: set --leader-election-namespace to the namespace of the Secret")
			}
			sec := &corev1.Secret{}
			if err := reader.Get(ctx, client.ObjectKey{Namespace: secretNamespace, Name: name}, sec); err != nil {
				return nil, err
			}
			return sec.Data, nil
		},
		SecretNamespace: secretNamespace,
		Binaries:        bins,
		StateDir:        o.StateDir,
		AdvertiseHost:   o.LocalAdvertiseHost,
		MaxClusters:     o.LocalMaxClusters,
		ServiceCIDR:     o.LocalServiceCIDR,
		Certificates:    o.Certificates,
		Notify:          notify,
		ListClusters: func(ctx context.Context) ([]clustersv1alpha1.Cluster, error) {
			list := &clustersv1alpha1.ClusterList{}
			err := reader.List(ctx, list)
			return list.Items, err
		},
		Logger: log.WithName("local"),
	})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(lb); err != nil {
		return nil, fmt.Errorf("adding the local backend: %w", err)
	}
	log.Info("The local backend serves", "versions", lb.Versions(), "stateDir", o.StateDir)
	backends[local.Name] = lb
	return backends, nil
}

// newHostedBackend builds the hosted backend and adds it to the manager (it runs on the leader).
func newHostedBackend(mgr ctrl.Manager, o *runOptions, notify backend.Notify, log logr.Logger) (*hosted.Backend, error) {
	reader := mgr.GetAPIReader()
	seedNamespace := o.HostedNamespace
	if seedNamespace == "" {
		if data, err := os.ReadFile(inClusterNamespaceFile); err == nil {
			seedNamespace = string(data)
		}
	}
	self, err := ownPod()
	if err != nil {
		return nil, err
	}
	// The operator's own namespace holds the key that wraps the keys kept beside the snapshots:
	// its pod's, or out of a pod the namespace of its Lease.
	own := self.Namespace
	if own == "" {
		own = o.LeaderElectionNamespace
	}
	hb, err := hosted.New(hosted.Options{
		Platform:    mgr.GetConfig(),
		InCluster:   fileExists(inClusterNamespaceFile),
		OperatorPod: self,
		Namespace:   own,
		SeedConfig: func(ctx context.Context, seed providersv1alpha1.SeedRef) (*rest.Config, error) {
			if seedNamespace == "" {
				return nil, fmt.Errorf("spec.hosted.seed names Secret %s, but the operator does not run in a pod: set --hosted-seed-namespace", seed.SecretName)
			}
			return seedConfig(ctx, reader, seedNamespace, seed)
		},
		Notify:        notify,
		MaxRolling:    o.HostedMaxRolling,
		SecretRecheck: o.HostedSecretRecheck,
		Certificates:  o.Certificates,
		// The shared cache: the Cluster reconcilers keep it filled with every Cluster.
		Clusters: mgr.GetClient(),
		Logger:   log.WithName("hosted"),
	})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(hb); err != nil {
		return nil, fmt.Errorf("adding the hosted backend: %w", err)
	}
	return hb, nil
}

// mayWatchSecrets asks the platform whether the operator's identity may list and watch Secrets in
// every namespace. Only then does it watch the kubeconfig Secrets it writes (a label-selected
// informer still needs both verbs cluster-wide); deploy/rbac grants neither, so that a taken-over
// operator cannot read every Secret of the platform.
func mayWatchSecrets(ctx context.Context, cfg *rest.Config) (bool, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, err
	}
	for _, verb := range []string{"list", "watch"} {
		review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "secrets"}},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("asking the platform whether this identity may %s Secrets: %w", verb, err)
		}
		if !review.Status.Allowed {
			return false, nil
		}
	}
	return true, nil
}

// ownPod names the operator's pod when it runs in one: the namespace of its ServiceAccount and
// its host name (the pod's name, as leaderIdentity takes it). Out of a pod: empty.
func ownPod() (types.NamespacedName, error) {
	if !fileExists(inClusterNamespaceFile) {
		return types.NamespacedName{}, nil
	}
	data, err := os.ReadFile(inClusterNamespaceFile)
	if err != nil {
		return types.NamespacedName{}, fmt.Errorf("the operator's namespace: %w", err)
	}
	name, err := os.Hostname()
	if err != nil {
		return types.NamespacedName{}, fmt.Errorf("the operator's pod name (its host name): %w", err)
	}
	return types.NamespacedName{Namespace: strings.TrimSpace(string(data)), Name: name}, nil
}

// seedConfig reads a seed's kubeconfig from its Secret.
func seedConfig(ctx context.Context, c client.Reader, namespace string, seed providersv1alpha1.SeedRef) (*rest.Config, error) {
	key := seed.Key
	if key == "" {
		key = "kubeconfig"
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: seed.SecretName}, sec); err != nil {
		return nil, fmt.Errorf("reading the seed's Secret %s/%s: %w", namespace, seed.SecretName, err)
	}
	data, ok := sec.Data[key]
	if !ok {
		return nil, fmt.Errorf("the seed's Secret %s/%s has no key %q", namespace, seed.SecretName, key)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig in the seed's Secret %s/%s (key %s) does not load: %w", namespace, seed.SecretName, key, err)
	}
	return cfg, nil
}

// cacheSynced is a readiness check that passes once the shared cache has synced.
func cacheSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), readyzCacheTimeout)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the shared cache has not synced yet")
		}
		return nil
	}
}
