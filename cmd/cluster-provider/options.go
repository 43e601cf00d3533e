package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/openmcp-local/cluster-provider/backend/certs"
	"github.com/openmcp-local/cluster-provider/backend/hosted"
	"github.com/openmcp-local/cluster-provider/backend/local"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
)

// The names --controllers accepts.
const (
	controllerProviderConfig = "providerconfig"
	controllerAccessRequest  = "accessrequest"
	controllerScheduler      = "scheduler"
)

// knownControllers are the valid --controllers names, sorted.
var knownControllers = []string{controllerAccessRequest, controllerProviderConfig, controllerScheduler}

// defaultControllers run without --controllers. The scheduler runs only when named: it needs the
// scheduler: section of --config, and openMCP's own scheduler may answer ClusterRequests instead.
var defaultControllers = []string{controllerAccessRequest, controllerProviderConfig}

// runOptions are the flags of `cluster-provider run`.
type runOptions struct {
	contract
	// Controllers is --controllers as given; Enabled holds it parsed by validate.
	Controllers string
	// Enabled are the controllers to run, filled by validate.
	Enabled map[string]bool
	// ConfigPath is --config, the optional configuration file.
	ConfigPath string
	// Kubeconfig is --kubeconfig; empty means $KUBECONFIG, in-cluster or ~/.kube/config.
	Kubeconfig string
	// LeaderElect is --leader-elect. Default false.
	LeaderElect bool
	// LeaderElectionNamespace is --leader-election-namespace; empty means the pod's namespace.
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod are --leader-elect-lease-duration,
	// --leader-elect-renew-deadline and --leader-elect-retry-period (leader.go says why 137s, 107s
	// and 26s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// MetricsBindAddress is --metrics-bind-address; "0" disables the metrics endpoint.
	MetricsBindAddress string
	// MetricsSecure is --metrics-secure: serve metrics over HTTPS, for authenticated and
	// authorized clients only. Default false (plain HTTP).
	MetricsSecure bool
	// HealthProbeBindAddress is --health-probe-bind-address (/healthz, /readyz); "0" disables it.
	HealthProbeBindAddress string
	// LocalBinaries is --local-binaries: comma-separated folders, each with a kube-apiserver and
	// an etcd. Empty disables the local backend.
	LocalBinaries string
	// LocalBinaryDirs holds LocalBinaries split, filled by validate.
	LocalBinaryDirs []string
	// StateDir is --state-dir: one folder per local cluster. Default /var/lib/cluster-provider.
	StateDir string
	// LocalAdvertiseHost is --local-advertise-host: the host of local clusters' endpoints.
	// Default 127.0.0.1.
	LocalAdvertiseHost string
	// LocalMaxClusters is --local-max-clusters. Default 20.
	LocalMaxClusters int
	// LocalServiceCIDR is --local-service-cidr: the service range of new local clusters.
	// Default local.DefaultServiceCIDR.
	LocalServiceCIDR string
	// ClusterWorkers is --cluster-workers: Clusters of one profile reconciled in parallel.
	// Default profile.DefaultWorkers.
	ClusterWorkers int
	// AccessRequestWorkers is --accessrequest-workers: AccessRequests of one profile reconciled in
	// parallel. Default profile.DefaultWorkers.
	AccessRequestWorkers int
	// KindBackend is --kind-backend: run Clusters of kind ProviderConfigs as kind clusters (needs a
	// Docker engine). Default false.
	KindBackend bool
	// HostedBackend is --hosted-backend: run the control planes of hosted ProviderConfigs as
	// workloads in the platform cluster (or their seeds). Default false.
	HostedBackend bool
	// HostedNamespace is --hosted-seed-namespace: where the seeds' kubeconfig Secrets are. Default:
	// the pod's namespace.
	HostedNamespace string
	// HostedMaxRolling is --hosted-max-rolling: how many existing control planes roll at once.
	// Default hosted.DefaultMaxRolling.
	HostedMaxRolling int
	// HostedSecretRecheck is --hosted-secret-recheck: how long a control plane's Secret read or
	// written is trusted before it is read again. Default hosted.DefaultSecretRecheck.
	HostedSecretRecheck time.Duration
	// AccessNamespace is --access-namespace: the namespace, in every cluster, of the
	// ServiceAccounts of token AccessRequests. Default openmcp-access.
	AccessNamespace string
	// TokenValidity is --token-validity: how long a granted token is valid. Default 720h.
	TokenValidity time.Duration
	// GrantCheck is --grant-check: how often a Granted AccessRequest checks what was made for it
	// (in its cluster, and its kubeconfig Secret where Secrets are not watched). Default 10m.
	GrantCheck time.Duration
	// Certificates are --certificate-validity and --certificate-renew-before: the lifetime of the
	// clusters' leaf certificates (local and hosted). Default a year, renewed 30 days before.
	Certificates certs.Lifetime
	// Zap holds the --zap-* logging flags.
	Zap zap.Options
}

// contract holds the flags openMCP's operator passes to both commands of a ClusterProvider image
// (its provider deployment contract: --environment, --verbosity, --provider-name).
type contract struct {
	// ProviderName is --provider-name: this operator's name in ClusterProfiles, labels and the
	// leader election lease. Required by run; a DNS label.
	ProviderName string
	// Environment is --environment, the first part of ClusterProfile names. Default "default".
	Environment string
	// Verbosity is --verbosity: DEBUG, INFO or ERROR in any case; empty means INFO.
	Verbosity string
}

// bind binds the contract's flags to fs.
func (c *contract) bind(fs *flag.FlagSet) {
	fs.StringVar(&c.ProviderName, "provider-name", "",
		"This operator's name (a DNS label; run requires it): ClusterProfiles name it as their provider, AccessRequests are labelled with it.")
	fs.StringVar(&c.Environment, "environment", "default",
		"The environment (a DNS label); ClusterProfiles are named <environment>.<provider-name>.<providerconfig>.")
	fs.StringVar(&c.Verbosity, "verbosity", "INFO",
		"Log level: DEBUG, INFO or ERROR (any case; empty is INFO). An explicit --zap-log-level wins over it.")
}

// validate checks the contract's flags; requireName says whether --provider-name must be set.
func (c *contract) validate(requireName bool) []error {
	var errs []error
	switch {
	case c.ProviderName != "":
		errs = append(errs, dnsLabel("--provider-name", c.ProviderName))
	case requireName:
		errs = append(errs, errors.New("--provider-name is required"))
	}
	errs = append(errs, dnsLabel("--environment", c.Environment))
	if _, err := verbosityLevel(c.Verbosity); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// verbosityLevel maps a --verbosity value to a log level.
func verbosityLevel(v string) (zapcore.Level, error) {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "", "INFO":
		return zapcore.InfoLevel, nil
	case "DEBUG":
		return zapcore.DebugLevel, nil
	case "ERROR":
		return zapcore.ErrorLevel, nil
	}
	return 0, fmt.Errorf("--verbosity %q: want DEBUG, INFO or ERROR (any case)", v)
}

// newRunFlags binds the flags of `run` to o, with their defaults.
func newRunFlags(o *runOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("cluster-provider run", flag.ContinueOnError)
	o.contract.bind(fs)
	fs.StringVar(&o.Controllers, "controllers", strings.Join(defaultControllers, ","),
		"Comma-separated controllers to run; valid are "+strings.Join(knownControllers, ", ")+" (scheduler needs the scheduler: section of --config).")
	fs.StringVar(&o.ConfigPath, "config", "",
		"Optional YAML configuration file (accessRequest.selector).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "",
		"Path to a kubeconfig; default $KUBECONFIG, the in-cluster config, or ~/.kube/config.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", false,
		"Elect a leader among replicas; only the leader reconciles.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election lease, and out of a pod of the hosted backend's key-wrapping Secret; default the pod's namespace (required out of cluster).")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", defaultLeaseDuration,
		"How long a standby waits, after the leader's last renewal, before it takes the lease.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", defaultRenewDeadline,
		"How long the leader keeps trying to renew its lease (the platform's API server is away) before it stops and its local clusters with it.")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", defaultRetryPeriod,
		"How often the leader renews its lease and a standby tries to take it.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8080",
		"host:port of the metrics endpoint; 0 disables it.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", false,
		"Serve metrics over HTTPS (a self-signed certificate) to clients the platform's API server authenticates and authorizes for GET /metrics; false serves plain HTTP.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081",
		"host:port of /healthz and /readyz; 0 disables them.")
	fs.StringVar(&o.LocalBinaries, "local-binaries", "",
		"Comma-separated folders, each holding a kube-apiserver and an etcd, for the local backend; the version each offers is what its kube-apiserver --version prints. Empty disables the local backend.")
	fs.StringVar(&o.StateDir, "state-dir", "/var/lib/cluster-provider",
		"Folder of the local backend's clusters: one folder per Cluster with its data, certificates and ports.")
	fs.StringVar(&o.LocalAdvertiseHost, "local-advertise-host", "127.0.0.1",
		"Host (IP or DNS name) in local clusters' endpoints and serving certificates; a non-loopback host makes their API servers listen on every interface.")
	fs.IntVar(&o.LocalMaxClusters, "local-max-clusters", 20,
		"How many local clusters may run at once; Clusters beyond get Provisioned=False, reason CapacityExhausted.")
	fs.StringVar(&o.LocalServiceCIDR, "local-service-cidr", local.DefaultServiceCIDR,
		"Service range of new local clusters (each keeps the one it was created with). Choose one the platform's network does not use: the clusters' API servers call webhooks and APIServices at their Services' addresses from the operator's pod.")
	fs.IntVar(&o.ClusterWorkers, "cluster-workers", profile.DefaultWorkers.Cluster,
		"Workers per ClusterProfile for Clusters: how many Clusters of one profile are reconciled at once (one Cluster never by two).")
	fs.IntVar(&o.AccessRequestWorkers, "accessrequest-workers", profile.DefaultWorkers.AccessRequest,
		"Workers per ClusterProfile for AccessRequests: how many requests of one profile are granted at once (one request never by two).")
	fs.BoolVar(&o.KindBackend, "kind-backend", false,
		"Run the Clusters of kind ProviderConfigs as kind clusters (needs a Docker engine next to the operator); their state goes to <state-dir>/kind.")
	fs.BoolVar(&o.HostedBackend, "hosted-backend", false,
		"Run the control planes of hosted ProviderConfigs as workloads (etcd StatefulSet, API server Deployment) in a namespace per Cluster of the platform cluster or of the ProviderConfig's seed; needs no state dir.")
	fs.IntVar(&o.HostedMaxRolling, "hosted-max-rolling", hosted.DefaultMaxRolling,
		"How many existing hosted control planes may roll at once (a new image or template, changed resources, renewed certificates, drift put back); the others wait their turn. Creations do not count.")
	fs.DurationVar(&o.HostedSecretRecheck, "hosted-secret-recheck", hosted.DefaultSecretRecheck,
		"How long the hosted backend trusts a control plane's Secret (CAs, certificates, keys) it read or wrote before it reads it again: Secrets are not watched, so a Secret deleted or edited by hand is made anew at the first reconcile after this. Negative: read at every reconcile.")
	fs.StringVar(&o.HostedNamespace, "hosted-seed-namespace", "",
		"Namespace of the seeds' kubeconfig Secrets (spec.hosted.seed.secretName); default: the operator pod's namespace.")
	fs.StringVar(&o.AccessNamespace, "access-namespace", accessrequest.DefaultNamespace,
		"Namespace, in every cluster, of the ServiceAccounts of token AccessRequests; created if missing.")
	fs.DurationVar(&o.Certificates.Validity, "certificate-validity", certs.LeafValidity,
		"How long the clusters' leaf certificates (API server serving, etcd, controller manager, the operator's admin) are valid; local and hosted clusters. The CAs are not affected.")
	fs.DurationVar(&o.Certificates.RenewBefore, "certificate-renew-before", certs.RenewBefore,
		"How long before its end a leaf certificate is issued anew, by the same CA, while the cluster runs; less than --certificate-validity.")
	fs.DurationVar(&o.Certificates.CAValidity, "ca-validity", certs.CAValidity,
		"How long a new CA of a cluster is valid (local and hosted: the cluster CA, and a hosted cluster's etcd CA). A leaf certificate never outlives its CA.")
	fs.DurationVar(&o.Certificates.CARenewBefore, "ca-renew-before", certs.CARenewBefore,
		"How long before its end a cluster's CA is rotated (local and hosted): a new CA is trusted beside it for a quarter of this, then signs every certificate while the old one stays trusted for another quarter, then the old one is dropped. At most two thirds of --ca-validity.")
	fs.DurationVar(&o.TokenValidity, "token-validity", accessrequest.DefaultTokenValidity,
		"How long a granted token is valid (an AccessRequest's spec.ttl may end it sooner); a new one replaces it after 80% of that. At least 10m.")
	fs.DurationVar(&o.GrantCheck, "grant-check", accessrequest.DefaultGrantCheck,
		"How often a Granted AccessRequest checks what was made for it in its cluster and, where the operator may not list and watch Secrets, its kubeconfig Secret, and makes again what is missing or changed. At least 1s.")
	o.Zap.BindFlags(fs)
	return fs
}

// parseRunOptions parses and validates the arguments of `run`. It returns flag.ErrHelp for -h.
func parseRunOptions(args []string) (*runOptions, error) {
	o := &runOptions{}
	fs := newRunFlags(o)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if !flagSet(fs, "zap-log-level") {
		level, _ := verbosityLevel(o.Verbosity) // validated
		o.Zap.Level = level
	}
	return o, nil
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// validate checks every flag and fills Enabled. The error names each offending flag.
func (o *runOptions) validate() error {
	errs := o.contract.validate(true)
	switch {
	case o.LeaderElectionNamespace != "":
		errs = append(errs, dnsLabel("--leader-election-namespace", o.LeaderElectionNamespace))
	case o.LeaderElect && !fileExists(inClusterNamespaceFile):
		errs = append(errs, errors.New("--leader-elect needs --leader-election-namespace when not running in a pod"))
	}
	errs = append(errs, o.validateLease())
	enabled, err := parseControllers(o.Controllers)
	errs = append(errs, err)
	o.Enabled = enabled
	o.LocalBinaryDirs = nil
	for dir := range strings.SplitSeq(o.LocalBinaries, ",") {
		if dir = strings.TrimSpace(dir); dir != "" {
			o.LocalBinaryDirs = append(o.LocalBinaryDirs, dir)
		}
	}
	if len(o.LocalBinaryDirs) > 0 && o.StateDir == "" {
		errs = append(errs, errors.New("--state-dir must not be empty when --local-binaries is set"))
	}
	errs = append(errs, dnsLabel("--access-namespace", o.AccessNamespace))
	if o.Certificates.Validity <= 0 || o.Certificates.RenewBefore <= 0 || o.Certificates.RenewBefore >= o.Certificates.Validity {
		errs = append(errs, fmt.Errorf("--certificate-renew-before %s must be positive and less than --certificate-validity %s",
			o.Certificates.RenewBefore, o.Certificates.Validity))
	}
	if o.HostedMaxRolling < 1 {
		errs = append(errs, fmt.Errorf("--hosted-max-rolling %d: must be at least 1", o.HostedMaxRolling))
	}
	if o.GrantCheck < time.Second {
		errs = append(errs, fmt.Errorf("--grant-check %s: must be at least 1s", o.GrantCheck))
	}
	if c := o.Certificates; c.CAValidity <= 0 || c.CARenewBefore <= 0 || 3*c.CARenewBefore > 2*c.CAValidity {
		errs = append(errs, fmt.Errorf("--ca-renew-before %s: must be positive and at most two thirds of --ca-validity %s, so that a new CA is not due for its own rotation before the last one ends",
			c.CARenewBefore, c.CAValidity))
	}
	if o.TokenValidity < 10*time.Minute {
		errs = append(errs, fmt.Errorf("--token-validity %s: must be at least 10m, the shortest validity the TokenRequest API grants", o.TokenValidity))
	}
	for _, w := range []struct {
		flag string
		n    int
	}{{"--cluster-workers", o.ClusterWorkers}, {"--accessrequest-workers", o.AccessRequestWorkers}} {
		if w.n < 1 || w.n > 64 {
			errs = append(errs, fmt.Errorf("%s %d: must be between 1 and 64", w.flag, w.n))
		}
	}
	if o.LocalMaxClusters < 1 {
		errs = append(errs, fmt.Errorf("--local-max-clusters %d: must be at least 1", o.LocalMaxClusters))
	}
	if err := local.ValidServiceCIDR(o.LocalServiceCIDR); err != nil {
		errs = append(errs, fmt.Errorf("--local-service-cidr %w", err))
	}
	if h := o.LocalAdvertiseHost; net.ParseIP(h) == nil && len(validation.IsDNS1123Subdomain(h)) > 0 {
		errs = append(errs, fmt.Errorf("--local-advertise-host %q: want an IP address or a DNS name", h))
	}
	errs = append(errs,
		bindAddress("--metrics-bind-address", o.MetricsBindAddress),
		bindAddress("--health-probe-bind-address", o.HealthProbeBindAddress))
	return errors.Join(errs...)
}

// inClusterNamespaceFile holds the pod's namespace, the default of --leader-election-namespace.
var inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// parseControllers parses a --controllers value: a comma-separated list of known names.
func parseControllers(v string) (map[string]bool, error) {
	enabled := map[string]bool{}
	for name := range strings.SplitSeq(v, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(knownControllers, name) {
			return nil, fmt.Errorf("--controllers: unknown controller %q; valid are %s", name, strings.Join(knownControllers, ", "))
		}
		enabled[name] = true
	}
	if len(enabled) == 0 {
		return nil, fmt.Errorf("--controllers: name at least one controller; valid are %s", strings.Join(knownControllers, ", "))
	}
	return enabled, nil
}

// dnsLabel checks that v, the value of flag, is an RFC 1123 label: it becomes part of object
// names and label values.
func dnsLabel(flag, v string) error {
	if msgs := validation.IsDNS1123Label(v); len(msgs) > 0 {
		return fmt.Errorf("%s %q: %s", flag, v, strings.Join(msgs, "; "))
	}
	return nil
}

// bindAddress checks a listen address: "0" (disabled) or host:port with a numeric port.
func bindAddress(flag, v string) error {
	if v == "0" {
		return nil
	}
	_, port, err := net.SplitHostPort(v)
	if err == nil {
		if _, perr := strconv.ParseUint(port, 10, 16); perr != nil {
			err = fmt.Errorf("port %q is not a number from 0 to 65535", port)
		}
	}
	if err != nil {
		return fmt.Errorf("%s %q: want host:port, or 0 to disable: %w", flag, v, err)
	}
	return nil
}

// initOptions are the flags of `cluster-provider init`.
type initOptions struct {
	// contract: --provider-name and --environment are checked and reported, --verbosity ERROR
	// prints only errors.
	contract
	// Kubeconfig is --kubeconfig, as for run.
	Kubeconfig string
	// Timeout is --timeout: how long to wait for the CRDs to become Established. Default 1m.
	Timeout time.Duration
}

func newInitFlags(o *initOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("cluster-provider init", flag.ContinueOnError)
	o.contract.bind(fs)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "",
		"Path to a kubeconfig; default $KUBECONFIG, the in-cluster config, or ~/.kube/config.")
	fs.DurationVar(&o.Timeout, "timeout", time.Minute,
		"How long to wait for the CRDs to become Established.")
	return fs
}

// parseInitOptions parses and validates the arguments of `init`. It returns flag.ErrHelp for -h.
func parseInitOptions(args []string) (*initOptions, error) {
	o := &initOptions{}
	if err := parseFlags(newInitFlags(o), args); err != nil {
		return nil, err
	}
	errs := o.contract.validate(false)
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %s: must be positive", o.Timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return o, nil
}

// parseFlags parses args silently (the caller prints errors its own way) and rejects positional
// arguments: no command takes any.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: %s takes only flags", fs.Arg(0), fs.Name())
	}
	return nil
}

// printFlags writes the usage of a command and its flags to w.
func printFlags(w io.Writer, fs *flag.FlagSet, summary string) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n\nFlags:\n", fs.Name(), summary)
	fs.SetOutput(w)
	fs.PrintDefaults()
}
