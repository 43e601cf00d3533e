package hosted

import (
	"context"
	"fmt"
	"time"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// ensure is Ensure with cl's ProviderConfig pc: it fills the scope once and runs the components.
func (b *Backend) ensure(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want, pc *providersv1alpha1.ProviderConfig) (backend.State, error) {
	sc := &scope{b: b, cl: cl, pc: pc, settings: pc.Spec.Hosted, release: func() {}}
	if sc.settings == nil {
		sc.settings = &providersv1alpha1.HostedBackendConfig{}
	}
	defer func() { sc.release() }()
	starting, err := sc.locate(ctx)
	if err != nil || starting {
		return backend.State{Reason: backend.ReasonBackendStarting, Message: "the hosted backend is starting", RetryAfter: 2 * time.Second}, err
	}
	if err := sc.resolve(ctx, want); err != nil {
		return backend.State{}, err
	}
	if err := sc.plan(ctx); err != nil {
		return backend.State{}, err
	}
	if err := sc.run(ctx); err != nil {
		return sc.st, err
	}
	if err := sc.save(ctx); err != nil {
		return backend.State{}, err
	}
	return sc.state(), nil
}

// locate finds the control plane and reads its record, once; a new one is admitted (quota.go)
// and gets a record of the ProviderConfig of now. starting: the backend has not started.
func (sc *scope) locate(ctx context.Context) (starting bool, err error) {
	b, cl, settings := sc.b, sc.cl, sc.settings
	h, ps, found, err := b.locate(ctx, cl, settings.Seed)
	if err != nil || h == nil {
		return err == nil, err
	}
	sc.h, sc.found = h, found
	if !found { // a control plane that exists is never refused: a lowered cap applies to new ones
		if sc.release, err = b.admit(ctx, h, cl, settings, sc.pc.Name); err != nil {
			sc.release = func() {}
			return false, err // refused: nothing made
		}
	}
	if !found || ps.Version == "" {
		// A new control plane: the ProviderConfig of now decides its seed and storage, for its life.
		ps = providerStatus{StorageClassName: settings.StorageClassName, HighAvailability: settings.HighAvailability}
		if settings.StorageSize != nil {
			ps.StorageSize = settings.StorageSize.String()
		}
		if settings.Seed != nil {
			ps.Seed, ps.SeedKey = settings.Seed.SecretName, settings.Seed.Key
		}
		if !found {
			if err := b.restoreFrom(ctx, h, cl, &ps, objectStoreOf(sc.pc)); err != nil {
				return false, err // refused: nothing made
			}
		}
	}
	sc.ps = ps
	return false, nil
}

// resolve decides the version: the recorded one, or a change Resolve allows and the control plane
// can make (upgradeRefusal), or the image refresh cl asks for (imageRefresh).
func (sc *scope) resolve(ctx context.Context, want backend.Want) error {
	b, h, cl := sc.b, sc.h, sc.cl
	version, change, err := backend.Resolve(sc.ps.Version, want)
	if err != nil {
		return err
	}
	if change != nil && !change.Refused {
		if change, err = b.upgradeRefusal(ctx, h, cl, change); err != nil {
			return err
		}
	}
	if change != nil && !change.Refused {
		// The target image's etcd and Kubernetes checked before anything rolls (preflight.go).
		if change, err = sc.upgradeChecked(ctx, change); err != nil {
			return err
		}
	}
	switch {
	case change == nil:
	case change.Refused || sc.checking != nil:
		version = change.From // the control plane stays as it runs
	default:
		sc.ps.UpgradeFrom = change.From
		b.opts.Logger.Info("Upgrading a hosted control plane", "cluster", backend.RefOf(cl).String(), "from", change.From, "to", change.To)
	}
	if change == nil && sc.found {
		if change, err = sc.imageRefresh(ctx); err != nil {
			return err
		}
	}
	sc.version, sc.change = version, change
	return nil
}

// plan makes the Spec of the control plane, and the record from it.
func (sc *scope) plan(ctx context.Context) error {
	s, err := sc.b.spec(sc.cl, sc.pc, sc.settings, sc.version, sc.ps)
	if err != nil {
		return err
	}
	if err := sc.b.hostSpec(ctx, sc.h, s); err != nil {
		return err
	}
	// From the ProviderConfig, as every setting of the control plane: Ensure is not the only caller,
	// and what it applies must not depend on who calls.
	s.Audit = sc.pc.Spec.Audit.On()
	ps := sc.ps
	sc.ps = providerStatus{Backend: Name, Namespace: s.Namespace, Version: backend.Normalize(sc.version), Image: s.Image,
		ServiceCIDR: s.ServiceCIDR, Exposure: string(s.exposure()), ExternalHost: ps.ExternalHost, UpgradeFrom: ps.UpgradeFrom,
		Seed: ps.Seed, SeedKey: ps.SeedKey, StorageClassName: s.StorageClassName, StorageSize: ps.StorageSize, ImageRefresh: ps.ImageRefresh,
		HighAvailability: s.HighAvailability, EtcdDataDir: ps.EtcdDataDir, EtcdRestoredFrom: ps.EtcdRestoredFrom, RestoredMark: ps.RestoredMark,
		Restore: ps.Restore, Restored: ps.Restored, Etcd: ps.Etcd, Preflight: ps.Preflight,
		Hibernated: ps.Hibernated, Waking: ps.Waking, Demanded: ps.Demanded, WokeAt: ps.WokeAt}
	sc.s = s
	return nil
}

// state is the backend.State of the control plane, made once at the end of the pipeline from what
// the components found.
func (sc *scope) state() backend.State {
	st, ps := sc.st, sc.ps
	st.ProviderStatus = ps
	if etcd := etcdPart(sc.members, ps.Etcd); etcd != nil && ps.Hibernated == nil {
		etcd.Type = backend.PartEtcd
		st.SetPart(*etcd)
	}
	if sc.pki != nil {
		st.SetPart(sc.pki.certificatesPart(time.Now()))
	}
	endpoint := exposure(sc.s, sc.settings, ps.ExternalHost, sc.pc.Name)
	endpoint.Type = backend.PartEndpoint
	st.SetPart(*endpoint)
	if etcd := st.Part(backend.PartEtcd); etcd != nil && etcd.Reason == backend.ReasonEtcdNoSpace && !st.Ready {
		// etcd's readiness check fails on its alarm: what keeps the cluster from Ready is that.
		st.Reason, st.Message = backend.ReasonEtcdNoSpace, etcd.Message
	}
	st.Runs = ps.Version
	st.Restored = ps.Restored
	if ps.Waking != nil && !st.Ready && sc.restoring == "" && time.Since(ps.Waking.Since) < wakeTimeout {
		// Requests wait for it at the front door (up to its wake timeout): the cluster stays
		// Ready for its consumers; past that, what keeps it from serving is said as for any.
		st.Ready, st.Reason = true, backend.ReasonWaking
		st.Message = "The control plane wakes from hibernation: etcd and the API servers start on their data; requests wait at the front door (" + backend.WakeWhy(ps.Waking.Trigger) + ")."
	}
	if sc.restoring != "" {
		st.Ready, st.Reason, st.Message = false, backend.ReasonRestoring, sc.restoring
		st.SetPart(backend.Part{Type: backend.PartControllerManager, Reason: backend.ReasonRestoring, Message: sc.restoring})
	}
	switch {
	case sc.change != nil && sc.change.Refused:
		st.VersionChange = sc.change
	case sc.checking != nil:
		st.VersionChange = sc.checking
	case ps.UpgradeFrom != "":
		st.Runs = ps.UpgradeFrom
		st.VersionChange = &backend.VersionChange{From: ps.UpgradeFrom, To: ps.Version, Message: fmt.Sprintf(
			"Upgrading from Kubernetes %s to %s: etcd rolls first on its claim, then the API server and the controller manager.", ps.UpgradeFrom, ps.Version)}
		if sc.waitsTurn() {
			st.VersionChange.Message = fmt.Sprintf("Upgrading from Kubernetes %s to %s: waiting for its turn, %d control planes roll at once (--hosted-max-rolling).",
				ps.UpgradeFrom, ps.Version, sc.b.opts.MaxRolling)
		}
	}
	if sc.hibPart != nil {
		st.SetPart(*sc.hibPart)
	}
	st.Notices = append(st.Notices, sc.notices...)
	if sc.retry > 0 && (st.RetryAfter == 0 || sc.retry < st.RetryAfter) {
		st.RetryAfter = sc.retry
	}
	return st
}

// waitsTurn reports whether a workload waits for its turn to roll.
func (sc *scope) waitsTurn() bool {
	return sc.etcdOut == workloadWaits || sc.apiOut == workloadWaits
}
