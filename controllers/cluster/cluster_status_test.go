package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/backend"
)

func condition(t *testing.T, cl *clustersv1alpha1.Cluster, condType string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(cl.Status.Conditions, condType)
	require.NotNil(t, c, "condition %s", condType)
	return *c
}

func TestSetState(t *testing.T) {
	ready := backend.State{
		Ready: true, Reason: backend.ReasonRunning, Message: "serving",
		Endpoint:       "https://127.0.0.1:1234",
		Endpoints:      map[string]string{"b": "https://b", backend.EndpointAPIServerExternal: "https://127.0.0.1:1234"},
		Version:        "1.37.1",
		ProviderStatus: map[string]any{"backend": "local", "restarts": 2},
	}
	// readyWith is ready, changed by change.
	readyWith := func(change func(s *backend.State)) backend.State {
		s := ready
		change(&s)
		return s
	}
	readyEndpoints := []clustersv1alpha1.Endpoint{{Name: backend.EndpointAPIServerExternal, URL: "https://127.0.0.1:1234"}, {Name: "b", URL: "https://b"}}
	const readyProvStatus = `{"backend":"local","restarts":2}`
	tests := []struct {
		name           string
		state          backend.State
		wantPhase      string
		wantProv       metav1.ConditionStatus
		wantProvReason string
		wantAPI        metav1.ConditionStatus
		wantAPIReason  string
		wantEndpoints  []clustersv1alpha1.Endpoint
		wantProvStatus string
		// wantKCM is the ControllerManagerReady condition's status, "" for none.
		wantKCM       metav1.ConditionStatus
		wantKCMReason string
	}{
		{
			name: "ready", state: ready, wantPhase: common.PhaseReady,
			wantProv: metav1.ConditionTrue, wantProvReason: ReasonProvisioned,
			wantAPI: metav1.ConditionTrue, wantAPIReason: backend.ReasonRunning,
			wantEndpoints:  readyEndpoints,
			wantProvStatus: readyProvStatus,
		},
		{
			name: "API server ready, controller manager starting: not Ready",
			state: readyWith(func(s *backend.State) {
				s.SetPart(backend.Part{Type: backend.PartControllerManager, Reason: backend.ReasonStarting, Message: "starts"})
			}),
			wantPhase: common.PhaseProgressing,
			wantProv:  metav1.ConditionTrue, wantProvReason: ReasonProvisioned,
			wantAPI: metav1.ConditionTrue, wantAPIReason: backend.ReasonRunning,
			wantEndpoints:  readyEndpoints,
			wantProvStatus: readyProvStatus,
			wantKCM:        metav1.ConditionFalse, wantKCMReason: backend.ReasonStarting,
		},
		{
			name: "complete",
			state: readyWith(func(s *backend.State) {
				s.SetPart(backend.Part{Type: backend.PartControllerManager, Ready: true, Reason: backend.ReasonRunning, Message: "runs"})
			}),
			wantPhase: common.PhaseReady,
			wantProv:  metav1.ConditionTrue, wantProvReason: ReasonProvisioned,
			wantAPI: metav1.ConditionTrue, wantAPIReason: backend.ReasonRunning,
			wantEndpoints:  readyEndpoints,
			wantProvStatus: readyProvStatus,
			wantKCM:        metav1.ConditionTrue, wantKCMReason: backend.ReasonRunning,
		},
		{
			name: "an etcd member down, the quorum serves (EtcdDegraded): still Ready",
			state: readyWith(func(s *backend.State) {
				s.SetPart(backend.Part{Type: backend.PartEtcd, Reason: backend.ReasonEtcdDegraded, Message: "1 of 3 etcd members not ready"})
			}),
			wantPhase: common.PhaseReady,
			wantProv:  metav1.ConditionTrue, wantProvReason: ReasonProvisioned,
			wantAPI: metav1.ConditionTrue, wantAPIReason: backend.ReasonRunning,
			wantEndpoints:  readyEndpoints,
			wantProvStatus: readyProvStatus,
		},
		{
			name: "etcd's quorum lost: not Ready",
			state: readyWith(func(s *backend.State) {
				s.SetPart(backend.Part{Type: backend.PartEtcd, Reason: backend.ReasonEtcdQuorumLost, Message: "2 of 3 etcd members not ready"})
			}),
			wantPhase: common.PhaseProgressing,
			wantProv:  metav1.ConditionTrue, wantProvReason: ReasonProvisioned,
			wantAPI: metav1.ConditionTrue, wantAPIReason: backend.ReasonRunning,
			wantEndpoints:  readyEndpoints,
			wantProvStatus: readyProvStatus,
		},
		{
			name: "re-created after its data was lost: Ready, and says so",
			state: readyWith(func(s *backend.State) {
				s.SetPart(backend.Part{Type: backend.PartProvisioned, Ready: true, Reason: backend.ReasonDataLost, Message: "the folder was gone"})
			}),
			wantPhase: common.PhaseReady,
			wantProv:  metav1.ConditionTrue, wantProvReason: ReasonDataLost,
			wantAPI: metav1.ConditionTrue, wantAPIReason: backend.ReasonRunning,
			wantEndpoints:  readyEndpoints,
			wantProvStatus: readyProvStatus,
		},
		{
			name:      "starting",
			state:     backend.State{Reason: backend.ReasonStarting, Message: "starting", Endpoint: "https://127.0.0.1:1234"},
			wantPhase: common.PhaseProgressing,
			wantProv:  metav1.ConditionTrue, wantProvReason: ReasonProvisioned,
			wantAPI: metav1.ConditionFalse, wantAPIReason: backend.ReasonStarting,
		},
		{
			name:      "backend starting: not provisioned yet",
			state:     backend.State{Reason: backend.ReasonBackendStarting, Message: "adopting"},
			wantPhase: common.PhaseProgressing,
			wantProv:  metav1.ConditionFalse, wantProvReason: backend.ReasonBackendStarting,
			wantAPI: metav1.ConditionFalse, wantAPIReason: backend.ReasonBackendStarting,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
			require.NoError(t, setState(cl, "local", tt.state, nil))
			finish(cl)
			assert.Equal(t, tt.wantPhase, cl.Status.Phase)
			assert.EqualValues(t, 3, cl.Status.ObservedGeneration)
			p := condition(t, cl, ConditionProvisioned)
			assert.Equal(t, tt.wantProv, p.Status)
			assert.Equal(t, tt.wantProvReason, p.Reason)
			if tt.wantProvReason == ReasonDataLost {
				assert.Equal(t, "the folder was gone", p.Message, "the backend's words")
			}
			a := condition(t, cl, ConditionAPIServerReady)
			assert.Equal(t, tt.wantAPI, a.Status)
			assert.Equal(t, tt.wantAPIReason, a.Reason)
			assert.Equal(t, tt.wantEndpoints, cl.Status.Endpoints)
			if k := meta.FindStatusCondition(cl.Status.Conditions, ConditionControllerManagerReady); tt.wantKCM == "" {
				assert.Nil(t, k, "no controller manager reported, no condition")
			} else if assert.NotNil(t, k) {
				assert.Equal(t, tt.wantKCM, k.Status)
				assert.Equal(t, tt.wantKCMReason, k.Reason)
			}
			if tt.wantProvStatus == "" {
				assert.Nil(t, cl.Status.ProviderStatus)
			} else {
				require.NotNil(t, cl.Status.ProviderStatus)
				assert.JSONEq(t, tt.wantProvStatus, string(cl.Status.ProviderStatus.Raw))
			}
		})
	}
}

func TestSetNotProvisionedKeepsControllerManagerFalse(t *testing.T) {
	cl := &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	require.NoError(t, setState(cl, "local", backend.State{Runs: "1.37.1", Ready: true, Reason: backend.ReasonRunning,
		Parts: []backend.Part{{Type: backend.PartControllerManager, Ready: true, Reason: backend.ReasonRunning}}}, nil))
	setNotProvisioned(cl, backend.ReasonBackendStarting, "adopting")
	finish(cl)
	assert.Equal(t, common.PhaseProgressing, cl.Status.Phase)
	assert.Equal(t, metav1.ConditionFalse, condition(t, cl, ConditionControllerManagerReady).Status)
	assert.Contains(t, readyMessage(cl), "No cluster runs")
}

func TestSetNotProvisionedAndDeletion(t *testing.T) {
	now := metav1.Now()
	cl := &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	setNotProvisioned(cl, backend.ReasonCapacityExhausted, "too many")
	finish(cl)
	assert.Equal(t, common.PhaseProgressing, cl.Status.Phase)
	assert.Equal(t, "too many", condition(t, cl, ConditionProvisioned).Message)
	assert.Equal(t, backend.ReasonCapacityExhausted, condition(t, cl, ConditionAPIServerReady).Reason)

	cl.DeletionTimestamp = &now
	setWaitingForFinalizers(cl, []string{"a/x", "b/y"})
	finish(cl)
	assert.Equal(t, common.PhaseTerminating, cl.Status.Phase)
	d := condition(t, cl, ConditionDeleted)
	assert.Equal(t, ReasonWaitingForFinalizers, d.Reason)
	assert.Contains(t, d.Message, "a/x, b/y")
}

func TestSetVersion(t *testing.T) {
	tests := []struct {
		name       string
		change     *backend.VersionChange
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsg    string
	}{
		{"runs what is asked", nil, metav1.ConditionTrue, ReasonVersionCurrent, "The cluster runs Kubernetes 1.37.1."},
		{"upgrading", &backend.VersionChange{From: "1.36.3", To: "1.37.1", Message: "Upgrading from 1.36.3 to 1.37.1."},
			metav1.ConditionFalse, backend.ReasonUpgrading, "Upgrading from 1.36.3 to 1.37.1."},
		{"refused", backend.Refuse("1.37.1", "1.36.3", "downgrade from 1.37.1 to 1.36.3 is refused"),
			metav1.ConditionFalse, backend.ReasonVersionChangeRefused, "downgrade from 1.37.1 to 1.36.3 is refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
			require.NoError(t, setState(cl, "local", backend.State{Ready: true, Reason: backend.ReasonRunning, Runs: "1.37.1", VersionChange: tt.change,
				Parts: []backend.Part{{Type: backend.PartControllerManager, Ready: true, Reason: backend.ReasonRunning}}}, nil))
			c := condition(t, cl, ConditionVersionUpToDate)
			assert.Equal(t, tt.wantStatus, c.Status)
			assert.Equal(t, tt.wantReason, c.Reason)
			assert.Equal(t, tt.wantMsg, c.Message)
			// The cluster keeps serving whatever happens to its version, and its phase says so.
			assert.Equal(t, metav1.ConditionTrue, condition(t, cl, ConditionAPIServerReady).Status)
			finish(cl)
			assert.Equal(t, common.PhaseReady, cl.Status.Phase)
			assert.Contains(t, condition(t, cl, ConditionProvisioned).Message, "Kubernetes 1.37.1")
		})
	}
}

func TestTransition(t *testing.T) {
	c := func(status metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: ConditionAPIServerReady, Status: status, Reason: reason}}
	}
	tests := []struct {
		name          string
		before, after []metav1.Condition
		want          bool
	}{
		{"new", nil, c(metav1.ConditionTrue, "Running"), true},
		{"same", c(metav1.ConditionTrue, "Running"), c(metav1.ConditionTrue, "Running"), false},
		{"status", c(metav1.ConditionTrue, "Running"), c(metav1.ConditionFalse, "Running"), true},
		{"reason", c(metav1.ConditionFalse, "Starting"), c(metav1.ConditionFalse, "Restarting"), true},
		{"absent after", c(metav1.ConditionTrue, "Running"), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := transition(tt.before, tt.after, ConditionAPIServerReady)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestEndpointResilient: the backend's PartEndpoint is condition EndpointResilient; False (an
// endpoint on one node) is a warning that leaves the Cluster Ready; a backend that does not
// report it has no such condition.
func TestEndpointResilient(t *testing.T) {
	cl := &clustersv1alpha1.Cluster{}
	st := backend.State{Ready: true, Reason: backend.ReasonRunning, Message: "serving", Runs: "1.37.1",
		Parts: []backend.Part{{Type: backend.PartEndpoint, Reason: backend.ReasonSingleNodeEndpoint, Message: "The endpoint 172.18.0.3 is one node's address"}}}
	require.NoError(t, setState(cl, "hosted", st, nil))
	finish(cl)
	c := condition(t, cl, ConditionEndpointResilient)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, backend.ReasonSingleNodeEndpoint, c.Reason)
	assert.Equal(t, common.PhaseReady, cl.Status.Phase, "a warning, not an outage")

	st.Parts = nil
	require.NoError(t, setState(cl, "local", st, nil))
	assert.Nil(t, meta.FindStatusCondition(cl.Status.Conditions, ConditionEndpointResilient))
}

// TestSetParts: each part the backend reports is the condition of its type, whatever the part;
// the conditions of the known part types it stops reporting go; Provisioned, which the reconciler
// sets itself, stays when no part says more.
func TestSetParts(t *testing.T) {
	running := backend.State{Ready: true, Reason: backend.ReasonRunning, Message: "serving", Runs: "1.37.1"}
	all := running
	all.Parts = []backend.Part{
		{Type: backend.PartControllerManager, Ready: true, Reason: backend.ReasonRunning, Message: "runs"},
		{Type: backend.PartEtcd, Reason: backend.ReasonEtcdNoSpace, Message: "full"},
		{Type: backend.PartEndpoint, Ready: true, Reason: backend.ReasonLoadBalancer, Message: "balanced"},
		{Type: backend.PartProvisioned, Ready: true, Reason: backend.ReasonDataLost, Message: "lost"},
	}
	cl := &clustersv1alpha1.Cluster{}
	require.NoError(t, setState(cl, "hosted", all, nil))
	for _, p := range all.Parts {
		c := condition(t, cl, p.Type)
		assert.Equal(t, p.Ready, c.Status == metav1.ConditionTrue, p.Type)
		assert.Equal(t, p.Reason, c.Reason, p.Type)
		assert.Equal(t, p.Message, c.Message, p.Type)
	}
	finish(cl)
	assert.Equal(t, common.PhaseProgressing, cl.Status.Phase, "etcd full: not Ready")

	require.NoError(t, setState(cl, "hosted", running, nil))
	for _, partType := range backend.PartTypes {
		assert.Nil(t, meta.FindStatusCondition(cl.Status.Conditions, partType), "%s is not reported any more", partType)
	}
	p := condition(t, cl, ConditionProvisioned)
	assert.Equal(t, ReasonProvisioned, p.Reason, "the reconciler's own Provisioned again")
	finish(cl)
	assert.Equal(t, common.PhaseReady, cl.Status.Phase)
}
