package etcdmaint

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/openmcp-local/cluster-provider/test/testenv"
)

const testQuota = 8 << 20

// cluster starts three real etcd members with an 8 MiB quota.
func cluster(t *testing.T) ([]*testenv.EtcdMember, []Member) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		testenv.MissingTool(t, "the envtest assets (etcd, etcdctl: make envtest)", err)
	}
	procs := testenv.Etcd(t, assets, 3, fmt.Sprintf("--quota-backend-bytes=%d", testQuota))
	members := make([]Member, len(procs))
	for i, p := range procs {
		members[i] = Member{Name: p.Name, URL: p.ClientURL, Client: &http.Client{}}
	}
	return procs, members
}

// logf is Maintain's log into the test's.
func logf(t *testing.T) func(string, ...any) {
	return func(msg string, kv ...any) { t.Log(append([]any{msg}, kv...)...) }
}

var value = strings.Repeat("x", 256<<10)

func put(ctx context.Context, m Member, key string) error {
	return m.post(ctx, m.timeout(), "/v3/kv/put", map[string]string{
		"key": base64.StdEncoding.EncodeToString([]byte(key)), "value": base64.StdEncoding.EncodeToString([]byte(value))}, nil)
}

// fill writes keys (key(i) for i = 0, 1, …) until etcd refuses for want of space, and returns how
// many were written.
func fill(t *testing.T, m Member, key func(int) string) int {
	for i := 0; ; i++ {
		require.Less(t, i, 1000, "an 8 MiB quota cannot take 1000 writes of 256 KiB")
		if err := put(t.Context(), m, key(i)); err != nil {
			require.ErrorContains(t, err, "database space exceeded")
			return i
		}
	}
}

func deleteAll(t *testing.T, m Member) {
	require.NoError(t, m.post(t.Context(), m.timeout(), "/v3/kv/deleterange", map[string]string{
		"key": base64.StdEncoding.EncodeToString([]byte{0}), "range_end": base64.StdEncoding.EncodeToString([]byte{0})}, nil))
}

// freed makes passes, as the backends do, until one disarms (a follower frees the pages a
// compaction released in its own time: a later pass defragments it), and returns that one.
func freed(t *testing.T, members []Member, p Policy) Report {
	t.Helper()
	var r Report
	require.Eventually(t, func() bool {
		r = Maintain(t.Context(), members, p, logf(t))
		p.FreedAt = r.FreedAt
		return r.Disarmed
	}, 30*time.Second, 200*time.Millisecond, "a pass disarms")
	return r
}

// TestMaintainNoSpace fills a three-member etcd until its NOSPACE alarm: with history only, a
// pass frees it and disarms; with live data, the alarm stays (and passes at the same revision
// come to nothing to free), until the data is deleted and the next passes free and disarm.
func TestMaintainNoSpace(t *testing.T) {
	_, members := cluster(t)
	ctx := t.Context()
	r := Maintain(ctx, members, Policy{Quota: testQuota}, nil)
	require.False(t, r.NoSpace)
	require.Len(t, r.Members, 3)
	for _, m := range r.Members {
		assert.Empty(t, m.Error)
		assert.Positive(t, m.DBSize)
	}
	assert.Contains(t, r.Message, "etcd takes writes")

	// History: one key written over and over.
	n := fill(t, members[0], func(int) string { return "/registry/same" })
	t.Logf("%d writes of one key until NOSPACE", n)
	require.Error(t, put(ctx, members[1], "/registry/other"), "full: writes refused")
	r = freed(t, members, Policy{Quota: testQuota})
	assert.False(t, r.NoSpace)
	assert.Contains(t, r.Defragmented, "m0", "each member defragmented")
	assert.Less(t, float64(r.Largest()), DisarmAt*testQuota)
	assert.Contains(t, r.Message, "disarmed")
	require.NoError(t, put(ctx, members[2], "/registry/other"), "writes work again")

	// Live data: written until a pass cannot free enough (while it can, it disarms).
	next := 0
	live := func(int) string { next++; return fmt.Sprintf("/registry/live-%d", next) }
	for round := 0; ; round++ {
		require.Less(t, round, 10, "live data fills 8 MiB in fewer rounds")
		t.Logf("%d keys until NOSPACE", fill(t, members[0], live))
		// Passes until one frees nothing more (a follower may free its pages a pass later).
		for pass := 0; ; pass++ {
			require.Less(t, pass, 20, "passes end up with nothing to free")
			r = Maintain(ctx, members, Policy{Quota: testQuota, FreedAt: r.FreedAt}, logf(t))
			if !r.NoSpace || len(r.Defragmented) == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond) // the backends' pace, shortened
		}
		if r.NoSpace {
			break
		}
		require.True(t, r.Disarmed, "%+v", r)
	}
	assert.False(t, r.Disarmed)
	assert.Equal(t, r.Revision, r.FreedAt)
	assert.Contains(t, r.Message, "reached its quota")
	assert.Contains(t, r.Message, "Delete objects")
	again := Maintain(ctx, members, Policy{Quota: testQuota, FreedAt: r.FreedAt}, logf(t))
	assert.True(t, again.NoSpace, "live data: nothing to free")
	assert.Equal(t, r.FreedAt, again.FreedAt)

	deleteAll(t, members[1]) // deletes work on a full etcd
	r = freed(t, members, Policy{Quota: testQuota, FreedAt: again.FreedAt})
	assert.Greater(t, r.FreedAt, again.FreedAt, "freed at the revision of the deletion")
	require.NoError(t, put(ctx, members[0], "/registry/after"), "writes work again")
}

// TestMaintainDefrag: a due periodic defragmentation defragments each fragmented member, one after
// the other, but none while a member does not answer (with one down and one defragmenting, three
// members have no quorum).
func TestMaintainDefrag(t *testing.T) {
	procs, members := cluster(t)
	ctx := t.Context()
	fragment := func() {
		for i := range 12 { // 3 MiB, then deleted and compacted: free pages
			require.NoError(t, put(ctx, members[0], fmt.Sprintf("/registry/k-%d", i)))
		}
		deleteAll(t, members[0])
		st, err := members[0].Status(ctx)
		require.NoError(t, err)
		require.NoError(t, members[0].compact(ctx, st.Header.Revision))
	}
	// fragmented are the members whose free pages are half their database or more (the leader's
	// at least; a follower frees its pages in its own time).
	fragmented := func() []string {
		var names []string
		for _, m := range members {
			if st, err := m.Status(ctx); err == nil && st.DBSizeInUse <= st.DBSize/2 {
				names = append(names, m.Name)
			}
		}
		return names
	}
	// awaitFragmented waits until a member shows its free pages (a write commits what is pending:
	// bbolt frees the pages no reader holds any more) and returns those that do.
	awaitFragmented := func() []string {
		var names []string
		require.Eventually(t, func() bool {
			require.NoError(t, members[0].post(ctx, time.Second, "/v3/kv/put", map[string]string{"key": "dGljaw==", "value": "dGljaw=="}, nil))
			names = fragmented()
			return len(names) > 0
		}, 30*time.Second, 100*time.Millisecond, "a member has free pages")
		return names
	}
	fragment()
	policy := Policy{Quota: testQuota, Defrag: true, DefragMinBytes: 1 << 20}
	r := Maintain(ctx, members, Policy{Quota: testQuota, DefragMinBytes: 1 << 20}, nil)
	assert.Empty(t, r.Defragmented, "not due")
	want := awaitFragmented()
	r = Maintain(ctx, members, policy, logf(t))
	// (a follower may free its pages in between and be defragmented too)
	assert.Subset(t, r.Defragmented, want, "each fragmented member")
	assert.True(t, slices.IsSorted(r.Defragmented), "one after the other: %v", r.Defragmented)
	for _, m := range r.Members {
		if slices.Contains(r.Defragmented, m.Name) {
			assert.Greater(t, m.DBSizeInUse, m.DBSize/2, "%s: no longer fragmented", m.Name)
		}
	}
	assert.Contains(t, r.Message, "defragmented "+strings.Join(r.Defragmented, ", "))

	fragment()
	awaitFragmented()
	procs[2].Stop()
	require.Eventually(t, func() bool { // the two left have a leader (m2 may have been it)
		return put(ctx, members[0], "/registry/after-m2") == nil
	}, 30*time.Second, 100*time.Millisecond)
	r = Maintain(ctx, members, policy, logf(t))
	assert.Empty(t, r.Defragmented, "a member is down: %+v", r)
	assert.NotEmpty(t, r.Members[2].Error)
	assert.Contains(t, r.Message, "member m2 does not answer")
	assert.False(t, r.NoSpace)
}
