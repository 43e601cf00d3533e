package accessrequest

import (
	"time"

	"k8s.io/client-go/transport"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Defaults of Options.
const (
	DefaultNamespace     = "openmcp-access"
	DefaultTokenValidity = 720 * time.Hour
	DefaultGrantCheck    = 10 * time.Minute
)

// Options configure the AccessRequest reconcilers of every profile. Zero values take the defaults
// named.
type Options struct {
	// Environment is --environment; it is part of every RequestID.
	Environment string
	// Namespace is --access-namespace: the clusters' namespace of the ServiceAccounts. Default
	// DefaultNamespace.
	Namespace string
	// TokenValidity is --token-validity: how long a token is valid (the request's TTL may end it
	// sooner). Default DefaultTokenValidity.
	TokenValidity time.Duration
	// GrantCheck is how often a Granted request checks that its cluster still holds what was
	// made for it (its ServiceAccount, roles and bindings: a cluster restored, replaced or
	// tampered with), and grants it again where not. Default DefaultGrantCheck; the Cluster's
	// changes (an upgrade, a restart) bring its requests back sooner.
	GrantCheck time.Duration
	// Clock tells the time for token validity and rotation. Default the real clock.
	Clock clock.PassiveClock
	// WrapTransport wraps the transport of every request to a cluster (tests count them).
	WrapTransport transport.WrapperFunc
	// SecretReader reads a request's kubeconfig Secret from the API server when the cache, which
	// holds only the Secrets the provider labelled, has none: a Secret of that name made by someone
	// else must be seen, so that it is never written or deleted. The operator sets the manager's
	// API reader; nil reads the cache only.
	SecretReader client.Reader
}

// WithDefaults returns o with its defaults filled in.
func (o Options) WithDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.TokenValidity <= 0 {
		o.TokenValidity = DefaultTokenValidity
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.GrantCheck <= 0 {
		o.GrantCheck = DefaultGrantCheck
	}
	return o
}
