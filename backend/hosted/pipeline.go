package hosted

import (
	"context"
	"time"

	"k8s.io/client-go/rest"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
)

// components are the steps of a control plane, in order: each has its own file
// (component_<name>.go) with its objects, its step and its readiness. A new component is one
// file and one line here.
//
// The order has reasons beyond the obvious one (etcd before the API servers):
//   - exposure precedes the PKI: the API server's serving certificate names the external host;
//   - encryption and restore precede the record and the workloads: a restore adopts its
//     snapshot's keys before its serve reads the snapshot, and changes the data folder etcd's pods
//     are made with;
//   - record saves what the workloads are made of before they are (see recordComponent);
//   - the front door and hibernation follow the record (a hibernation is saved with it) and precede
//     the workloads: a hibernated control plane stops the pipeline there, its workloads at zero;
//   - serving probes the API server; maintenance, rewrite and upgrade act on what it found.
var components = []component{
	namespaceComponent{},
	exposureComponent{},
	pkiComponent{},
	encryptionComponent{},
	restoreComponent{},
	recordComponent{},
	frontDoorComponent{},
	hibernationComponent{},
	etcdComponent{},
	apiServerComponent{},
	servingComponent{},
	controllerManagerComponent{},
	maintenanceComponent{},
	rewriteComponent{},
	upgradeComponent{},
}

// component is one part of a control plane.
type component interface {
	// name names the component in metrics and logs.
	name() string
	// step brings the component one step towards its plan and says whether it is ready.
	step(ctx context.Context, sc *scope) (result, error)
}

// result is what a step found. The zero value: ready. A component that is not ready says what it
// waits for; the pipeline goes on (later components check what they need: the API servers wait
// for etcd), unless stop is set.
type result struct {
	// waiting says why the component is not ready ("": it is).
	waiting string
	// retry, when set, is how soon to look again at the latest.
	retry time.Duration
	// stop ends this Ensure's pipeline after this component.
	stop bool
}

// scope is everything one Ensure works with, read once: the Cluster, its ProviderConfig and hosted
// settings, the host and the control plane's record (located once), the Spec, the PKI, the keys,
// and the State being built. Components read and change it; the record is saved once at the end
// (and at recordComponent) and the State made once (state).
type scope struct {
	b        *Backend
	cl       *clustersv1alpha1.Cluster
	pc       *providersv1alpha1.ProviderConfig
	settings *providersv1alpha1.HostedBackendConfig
	h        *host
	// found: the control plane existed before this Ensure.
	found bool
	// release gives back the place of spec.hosted.maxClusters held for a new control plane.
	release func()
	// ps is the record as the components change it.
	ps      providerStatus
	version string
	change  *backend.VersionChange
	s       *Spec
	pki     *pki
	keys    encryption.State
	admin   *rest.Config
	// external is the API server's external URL; waiting why there is none yet.
	external, waiting string
	// restoring says why a restore under way keeps the control plane from serving.
	restoring string
	// etcdOut and apiOut are the applier's outcomes for the workloads.
	etcdOut, apiOut int
	// apiGated: the API server's Deployment waits for etcd (apiServerComponent).
	apiGated bool
	// apiServes: the API server's Deployment serves (servingComponent).
	apiServes bool
	// members are the etcd members' states (maintenanceComponent; nil while a restore runs).
	members []memberState
	// st is the State being built; retry the soonest a component asked to look again.
	st    backend.State
	retry time.Duration

	// checking is the version change whose target image is being checked (preflight.go): the
	// control plane stays as it runs meanwhile.
	checking *backend.VersionChange

	// hibPart is the Hibernated part the hibernation component found, notices the Events of a
	// hibernation or a wake (the serving component starts the State after it).
	hibPart *backend.Part
	notices []backend.Warning
}

// retryWithin makes the Ensure come back within d at the latest.
func (sc *scope) retryWithin(d time.Duration) {
	if d > 0 && (sc.retry == 0 || d < sc.retry) {
		sc.retry = d
	}
}

// run runs the components in order, timing each.
func (sc *scope) run(ctx context.Context) error {
	for _, c := range components {
		start := time.Now()
		r, err := c.step(ctx, sc)
		took := time.Since(start)
		backend.ObserveHostedComponent(c.name(), took)
		if took > slowStep {
			sc.b.opts.Logger.V(1).Info("A slow step of a hosted control plane", "cluster", backend.RefOf(sc.cl).String(),
				"component", c.name(), "took", took.Round(time.Millisecond).String(), "waiting", r.waiting)
		}
		if err != nil {
			return err
		}
		sc.retryWithin(r.retry)
		if r.stop {
			return nil
		}
	}
	return nil
}

// slowStep is how long a step takes before it is logged (V(1)).
const slowStep = time.Second

// save writes the record when it changed since it was read or last saved: the one place the
// Ensure writes it.
func (sc *scope) save(ctx context.Context) error {
	// writeRecord compares with the stored record (read from memory while the cache shows it
	// unchanged) and writes only a change.
	return writeRecord(ctx, sc.h, sc.s, sc.ps)
}
