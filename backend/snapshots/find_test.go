package snapshots

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openmcp-local/cluster-provider/backend"
)

// TestFind: a snapshot belongs to its Cluster's namespace (issue 40, point 2). A Cluster of
// another namespace does not find it, and the refusal names none of that Cluster's snapshots.
func TestFind(t *testing.T) {
	const a, b types.UID = "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002"
	all := []backend.Snapshot{
		{Name: "20261126T020000Z", Cluster: a, Namespace: "team-a"},
		{Name: "20261126T010000Z", Cluster: a, Namespace: "team-a"},
		{Name: "20251126T010000Z", Cluster: a}, // taken before namespaces were recorded
	}
	for _, tc := range []struct {
		name, snapshot, namespace string
		own                       types.UID
		found                     bool
		says                      string
	}{
		{name: "its own Cluster", snapshot: "20261126T010000Z", namespace: "team-a", own: a, found: true},
		{name: "a new Cluster of the same namespace", snapshot: "20261126T010000Z", namespace: "team-a", own: b, found: true},
		{name: "a Cluster of another namespace", snapshot: "20261126T010000Z", namespace: "team-b", own: b,
			says: `there is no snapshot "20261126T010000Z" of the Cluster with UID ` + string(a) + " (it has none for a Cluster of namespace team-b)"},
		{name: "a Cluster of another namespace, a made-up name", snapshot: "20991126T010000Z", namespace: "team-b", own: b,
			says: "(it has none for a Cluster of namespace team-b)"},
		{name: "a made-up name in the same namespace lists the names", snapshot: "20991126T010000Z", namespace: "team-a", own: b,
			says: "(its snapshots: 20261126T020000Z, 20261126T010000Z)"},
		{name: "an old record, its own Cluster", snapshot: "20251126T010000Z", namespace: "team-a", own: a, found: true},
		{name: "an old record, a new Cluster: only its own Cluster may", snapshot: "20251126T010000Z", namespace: "team-a", own: b,
			says: "there is no snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Find(all, a, tc.snapshot, tc.namespace, tc.own)
			if tc.found {
				require.NoError(t, err)
				assert.Equal(t, tc.snapshot, got.Name)
				return
			}
			require.Error(t, err)
			assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
			assert.Contains(t, err.Error(), tc.says)
			if tc.namespace != "team-a" { // no name of another namespace's snapshots but the one asked for
				for _, s := range all {
					if s.Name != tc.snapshot {
						assert.NotContains(t, err.Error(), s.Name)
					}
				}
			}
		})
	}
}
