package etcdmaint

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChoose: the snapshot member is the healthy leader; without one, the healthy member that has
// applied the most; a member that is not healthy (no leader: cut off from its peers) is never
// chosen, even if it has the highest index or once led; none healthy is an error naming each.
func TestChoose(t *testing.T) {
	leader := func(name string, id, term, index uint64) Probe {
		return Probe{Name: name, Healthy: true, MemberID: id, Leader: id, RaftTerm: term, RaftIndex: index}
	}
	follower := func(name string, id, lead, term, index uint64) Probe {
		return Probe{Name: name, Healthy: true, MemberID: id, Leader: lead, RaftTerm: term, RaftIndex: index}
	}
	cutOff := func(name string, id, staleLead, term, index uint64) Probe {
		return Probe{Name: name, MemberID: id, Leader: staleLead, RaftTerm: term, RaftIndex: index, Error: "not healthy: RAFT NO LEADER"}
	}
	down := func(name string) Probe { return Probe{Name: name, Error: "dial tcp: connection refused"} }
	for _, tc := range []struct {
		name    string
		probes  []Probe
		want    string
		wantErr []string
	}{
		{name: "the leader", probes: []Probe{follower("etcd-0", 1, 2, 5, 100), leader("etcd-1", 2, 5, 100), follower("etcd-2", 3, 2, 5, 99)}, want: "etcd-1"},
		{name: "the leader, though a follower shows a higher index", probes: []Probe{follower("etcd-0", 1, 3, 5, 101), down("etcd-1"), leader("etcd-2", 3, 5, 100)}, want: "etcd-2"},
		{name: "a member cut off is not chosen, though it shows more", probes: []Probe{cutOff("etcd-0", 1, 1, 4, 500), follower("etcd-1", 2, 3, 5, 100), leader("etcd-2", 3, 5, 100)}, want: "etcd-2"},
		{name: "a member that claims to lead but is not healthy is not the leader", probes: []Probe{cutOff("etcd-0", 1, 1, 4, 500), follower("etcd-1", 2, 9, 5, 100), follower("etcd-2", 3, 9, 5, 90)}, want: "etcd-1"},
		{name: "no leader answered: the healthy one with the highest term", probes: []Probe{follower("etcd-0", 1, 9, 4, 200), follower("etcd-1", 2, 9, 5, 100), down("etcd-2")}, want: "etcd-1"},
		{name: "same term: the highest index", probes: []Probe{follower("etcd-0", 1, 9, 5, 99), follower("etcd-1", 2, 9, 5, 100)}, want: "etcd-1"},
		{name: "healthy without a status (it did not answer that): still a member of the quorum", probes: []Probe{{Name: "etcd-0", Healthy: true}, down("etcd-1")}, want: "etcd-0"},
		{name: "one member, healthy", probes: []Probe{leader("etcd-0", 7, 2, 10)}, want: "etcd-0"},
		{name: "none healthy: each named", probes: []Probe{cutOff("etcd-0", 1, 0, 4, 10), down("etcd-1"), cutOff("etcd-2", 3, 3, 4, 12)},
			wantErr: []string{"no etcd member is in the quorum", "etcd-0 (not healthy: RAFT NO LEADER)", "etcd-1 (dial tcp: connection refused)", "etcd-2 (not healthy"}},
		{name: "no member", wantErr: []string{"no etcd member"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, err := Choose(tc.probes)
			if tc.wantErr != nil {
				require.Error(t, err)
				assert.Equal(t, -1, i)
				for _, w := range tc.wantErr {
					assert.Contains(t, err.Error(), w)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, tc.probes[i].Name)
		})
	}
}
