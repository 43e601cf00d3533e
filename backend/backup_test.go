package backend

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

func TestParseSnapshotRef(t *testing.T) {
	for _, tc := range []struct {
		ref       string
		uid, name string
		ok        bool
	}{
		{ref: "6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a/20261125T213000Z", uid: "6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a", name: "20261125T213000Z", ok: true},
		{ref: " 6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a/20261125T213000Z-2 ", uid: "6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a", name: "20261125T213000Z-2", ok: true},
		{ref: "20261125T213000Z"},
		{ref: "/20261125T213000Z"},
		{ref: "6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a/"},
		{ref: "6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a/20261125T213000Z/x"},
		{ref: "../20261125T213000Z"},
		{ref: "6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a/.."},
		{ref: "u/n"},
		{ref: ""},
	} {
		uid, name, err := ParseSnapshotRef(tc.ref)
		if !tc.ok {
			require.Error(t, err, tc.ref)
			assert.Contains(t, err.Error(), "<uid of a Cluster>/<snapshot name>")
			continue
		}
		require.NoError(t, err, tc.ref)
		assert.Equal(t, types.UID(tc.uid), uid)
		assert.Equal(t, tc.name, name)
		assert.Equal(t, tc.uid+"/"+tc.name, Snapshot{Cluster: uid, Name: name}.Ref(), "Ref is what parses back")
	}
}

// FuzzParseSnapshotRef: any annotation value either parses into a UUID and a snapshot name, neither
// with a slash or a dot (so that neither leaves the snapshots' folders), or is refused; it never
// panics.
func FuzzParseSnapshotRef(f *testing.F) {
	for _, s := range []string{"6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a/20261125T213000Z", "a/b/c", "/", "", " x/y ", "../../etc/passwd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		uid, name, err := ParseSnapshotRef(ref)
		if err != nil {
			return
		}
		if uid == "" || name == "" || strings.ContainsAny(string(uid)+name, "/.\\") || !ValidSnapshotName(name) {
			t.Fatalf("%q parsed into %q and %q", ref, uid, name)
		}
	})
}
