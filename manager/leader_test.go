package manager

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestProfilesRunOnlyWhileLeader runs the engine in a controller-runtime manager with leader
// election. While another replica holds the lease the engine does not start and StartProfile
// waits; once elected the profile runs; when the lease is taken away, every profile stops.
func TestProfilesRunOnlyWhileLeader(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	const leaseName = "cluster-provider-test"
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leaseName},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("other-replica"),
			LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
	require.NoError(t, env.Client.Create(ctx, lease))

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                  testenv.Scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		LeaderElection:          true,
		LeaderElectionID:        leaseName,
		LeaderElectionNamespace: ns,
		LeaseDuration:           ptr.To(2 * time.Second),
		RenewDeadline:           ptr.To(time.Second),
		RetryPeriod:             ptr.To(100 * time.Millisecond),
	})
	require.NoError(t, err)
	e, err := New(ctx, mgr.GetCache(), Options{Scheme: testenv.Scheme, Kinds: testKinds()})
	require.NoError(t, err)
	require.NoError(t, mgr.Add(e))

	mgrCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mgrCtx) }()

	p := uniqueProfile("leader")
	profileCtx := make(chan context.Context, 1)
	rec := reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
		select {
		case profileCtx <- ctx:
		default:
		}
		return reconcile.Result{}, nil
	})
	started := make(chan error, 1)
	go func() { started <- e.StartProfile(ctx, profileOf(p, "1", rec, nil)) }()

	// The shared cache runs on every replica; the engine only on the leader.
	require.True(t, mgr.GetCache().WaitForCacheSync(ctx))
	select {
	case <-e.Ready():
		t.Fatal("the engine started without holding the lease")
	case err := <-started:
		t.Fatalf("StartProfile returned without leadership: %v", err)
	default:
	}

	// The other replica goes away: this one is elected and the profile starts.
	require.NoError(t, env.Client.Delete(ctx, lease))
	select {
	case err := <-started:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("StartProfile did not return after election")
	}
	newCluster(t, ns, "c", p)
	var reconcileCtx context.Context
	select {
	case reconcileCtx = <-profileCtx:
	case <-time.After(30 * time.Second):
		t.Fatal("the profile never reconciled")
	}

	// Another replica takes the lease over, as a real one would (new holder, acquire time and
	// transition count): this one loses it and everything stops.
	// The elector renews every RetryPeriod, so the takeover may conflict with a renewal.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(lease), lease); err != nil {
			return err
		}
		taken := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity = ptr.To("usurper-replica")
		lease.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
		lease.Spec.AcquireTime = &taken
		lease.Spec.RenewTime = &taken
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
		return env.Client.Update(ctx, lease)
	}))
	select {
	case err := <-mgrDone:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "leader election lost")
	case <-time.After(30 * time.Second):
		t.Fatal("the manager did not notice the lost lease")
	}
	select {
	case <-e.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the engine did not stop after the lease was lost")
	}
	assert.Empty(t, e.Profiles(), "no profile runs without the lease")
	assert.Error(t, reconcileCtx.Err(), "the profile's context is cancelled")
	assert.ErrorIs(t, e.StartProfile(ctx, profileOf(p, "1", rec, nil)), ErrStopped)
}
