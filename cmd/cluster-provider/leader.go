package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The lease settings of --leader-elect. The local backend's clusters are child processes of the
// leader: losing the lease ends the process and restarts every cluster, so the lease must outlive
// an outage of the platform's API server (an upgrade, a restart of a single-replica control
// plane) rather than give up after kube-controller-manager's 10 s. These are OpenShift's settings
// for its own operators, chosen to ride out 60 s without the API server:
//
//   - the leader keeps trying to renew for defaultRenewDeadline (107 s) after its last renewal,
//     every defaultRetryPeriod (26 s), then stops (the process exits, its clusters with it);
//   - a standby takes the lease only once it has seen it unchanged for defaultLeaseDuration
//     (137 s), measured on its own clock from when it first saw that renewal.
//
// So the old leader has stopped at least 30 s before anybody else may start: that margin covers
// the last renew request's timeout and clocks that run at different rates. Two leaders never run
// the same cluster for a second reason too: the local backend holds an exclusive lock on
// --state-dir while it runs clusters, so a second process with the same folder waits for it.
//
// The price is a slow takeover after a leader dies without releasing the lease (kill -9, node
// loss): up to the lease duration plus one retry period. A shutdown releases the lease at once,
// and a leader restarted in the same pod (a crashed container) takes its own lease back at once:
// its identity is the pod's name (leaderIdentity).
const (
	defaultLeaseDuration = 137 * time.Second
	defaultRenewDeadline = 107 * time.Second
	defaultRetryPeriod   = 26 * time.Second
)

// validateLease checks the --leader-elect-* durations as client-go's leader elector does, naming
// the flags.
func (o *runOptions) validateLease() error {
	switch {
	case o.RetryPeriod <= 0:
		return fmt.Errorf("--leader-elect-retry-period %s: must be positive", o.RetryPeriod)
	case float64(o.RenewDeadline) <= leaderelection.JitterFactor*float64(o.RetryPeriod):
		return fmt.Errorf("--leader-elect-renew-deadline %s: must be longer than %.1f × --leader-elect-retry-period (%s)",
			o.RenewDeadline, leaderelection.JitterFactor, o.RetryPeriod)
	case o.LeaseDuration <= o.RenewDeadline:
		return fmt.Errorf("--leader-elect-lease-duration %s: must be longer than --leader-elect-renew-deadline (%s)",
			o.LeaseDuration, o.RenewDeadline)
	}
	return nil
}

// leaderIdentity is this replica's name in the lease. In a pod it is the pod's name (its host
// name): a container that crashed and was restarted in the same pod takes its own lease back at
// once instead of waiting for it to expire. That is safe because the container runtime starts the
// new container only after every process of the old one has ended. Out of a pod two processes may
// share a host name, so a random suffix makes each unique, as controller-runtime does.
func leaderIdentity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("leader election identity: %w", err)
	}
	if fileExists(inClusterNamespaceFile) {
		return host, nil
	}
	return host + "_" + string(uuid.NewUUID()), nil
}

// newLeaseLock returns the Lease lock of --leader-elect, held under leaderIdentity. Its requests
// time out after half the renew deadline, so one hung request cannot use up the deadline (as in
// controller-runtime).
func newLeaseLock(cfg *rest.Config, o *runOptions, namespace string) (resourcelock.Interface, error) {
	if namespace == "" {
		data, err := os.ReadFile(inClusterNamespaceFile)
		if err != nil {
			return nil, errors.New("--leader-elect needs --leader-election-namespace when not running in a pod")
		}
		namespace = string(data)
	}
	id, err := leaderIdentity()
	if err != nil {
		return nil, err
	}
	cfg = rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	cfg.Timeout = max(o.RenewDeadline/2, time.Second)
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	coordination, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return resourcelock.New(resourcelock.LeasesResourceLock, namespace, leaseName(o.ProviderName),
		core, coordination, resourcelock.ResourceLockConfig{Identity: id})
}

// leaseName is the name of the leader election Lease.
func leaseName(provider string) string { return provider + ".cluster-provider.openmcp.cloud" }
