package backend

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

// now is a Wednesday, 2026-11-25 13:30 UTC.
var now = time.Date(2026, 11, 25, 13, 30, 0, 0, time.UTC)

// snapsAt are snapshots taken at the given times, named by them.
func snapsAt(times ...time.Time) []Snapshot {
	out := make([]Snapshot, len(times))
	for i, t := range times {
		out[i] = Snapshot{Name: t.UTC().Format("20060102T150405Z"), Taken: t, Size: 100}
	}
	return out
}

// hourly are n snapshots, one every hour, the newest at now.
func hourly(n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = now.Add(-time.Duration(i) * time.Hour)
	}
	return out
}

func names(snaps []Snapshot) []string {
	out := []string{}
	for _, s := range snaps {
		out = append(out, s.Name)
	}
	return out
}

func TestRetentionPrune(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		name  string
		r     Retention
		taken []time.Time
		// removed are the indexes into taken removed, oldest first.
		removed []int
	}{
		{name: "zero keeps all", r: Retention{}, taken: hourly(5)},
		{name: "keep only is today's flat count", r: KeepNewest(3), taken: hourly(6), removed: []int{5, 4, 3}},
		{name: "keep larger than the list", r: KeepNewest(10), taken: hourly(3)},
		{name: "unsorted input", r: KeepNewest(2), taken: []time.Time{now.Add(-2 * time.Hour), now, now.Add(-time.Hour)}, removed: []int{0}},
		{name: "hourly keeps the newest of each hour", r: Retention{Hourly: 2},
			taken:   []time.Time{now, now.Add(-10 * time.Minute), now.Add(-40 * time.Minute), now.Add(-50 * time.Minute), now.Add(-2 * time.Hour)},
			removed: []int{4, 3, 1}},
		{name: "hourly only: the newest kept even when older than the tiers", r: Retention{Hourly: 1},
			taken: []time.Time{now.Add(-3 * day), now.Add(-4 * day)}, removed: []int{1}},
		{name: "daily over a week of hourly snapshots", r: Retention{Daily: 3}, taken: hourly(24 * 7),
			// now is 13:30: today's newest is index 0, yesterday's newest 23:30 (index 14), the day before's (index 38).
			removed: slices.DeleteFunc(rangeDesc(24*7), func(i int) bool { return i == 0 || i == 14 || i == 38 })},
		{name: "tiers and keep combine", r: Retention{Keep: 2, Hourly: 3, Daily: 2}, taken: hourly(30),
			removed: slices.DeleteFunc(rangeDesc(30), func(i int) bool { return i <= 2 || i == 14 })},
		{name: "weekly counts Monday to Sunday", r: Retention{Weekly: 2},
			// Wednesday now, Monday this week, Sunday last week, Monday last week, Sunday the week before.
			taken:   []time.Time{now, now.Add(-2 * day), now.Add(-3 * day), now.Add(-9 * day), now.Add(-10 * day)},
			removed: []int{4, 3, 1}},
		{name: "monthly by calendar month", r: Retention{Monthly: 2},
			taken: []time.Time{now, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 31, 0, 0, 0, 0, time.UTC),
				time.Date(2026, 10, 2, 0, 0, 0, 0, time.UTC), time.Date(2026, 9, 30, 0, 0, 0, 0, time.UTC)},
			removed: []int{4, 3, 1}},
		{name: "a clock ahead counts in now's bucket", r: Retention{Hourly: 1},
			taken: []time.Time{now.Add(time.Hour), now, now.Add(-time.Hour)}, removed: []int{2, 1}},
		{name: "a wiped cluster's stale snapshots: the daily tier keeps the old good ones", r: Retention{Keep: 3, Daily: 3},
			taken:   []time.Time{now, now.Add(-time.Hour), now.Add(-2 * time.Hour), now.Add(-3 * time.Hour), now.Add(-day), now.Add(-2 * day), now.Add(-3 * day)},
			removed: []int{6, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snaps := snapsAt(tc.taken...)
			want := []string{}
			for _, i := range tc.removed {
				want = append(want, snaps[i].Name)
			}
			got := tc.r.Prune(snaps, now)
			assert.Equal(t, want, names(got))
		})
	}
}

// rangeDesc is n-1 … 0: indexes oldest first when index 0 is the newest.
func rangeDesc(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = n - 1 - i
	}
	return out
}

func TestRetentionString(t *testing.T) {
	assert.Equal(t, "the newest 24", KeepNewest(24).String())
	assert.Equal(t, "every snapshot", Retention{}.String())
	assert.Equal(t, "the newest 1, and the newest of each of the last 24 hours, 7 days, 4 weeks", Retention{Hourly: 24, Daily: 7, Weekly: 4}.String())
	assert.Equal(t, []string{"--keep=2", "--hourly=24", "--daily=7", "--weekly=4", "--monthly=0"}, Retention{Keep: 2, Hourly: 24, Daily: 7, Weekly: 4}.Flags())
}

func TestMakeRoom(t *testing.T) {
	sized := func(sizes ...int64) []Snapshot {
		snaps := snapsAt(hourly(len(sizes))...)
		for i := range snaps {
			snaps[i].Size = sizes[i]
		}
		return snaps
	}
	for _, tc := range []struct {
		name   string
		r      Retention
		snaps  []Snapshot
		free   int64
		remove []int // indexes, in the order removed
		beyond []int
		enough bool
		need   int64
	}{
		{name: "no snapshot yet", r: KeepNewest(2), free: 0, enough: true},
		{name: "room enough", r: KeepNewest(2), snaps: sized(100, 100, 100), free: 120, enough: true, need: 120},
		{name: "the policy's removals first, oldest first, only as many as needed", r: KeepNewest(1), snaps: sized(100, 100, 100, 100), free: 50,
			remove: []int{3}, enough: true, need: 120},
		{name: "then beyond the policy, never the newest", r: KeepNewest(3), snaps: sized(100, 100, 100, 100), free: 0,
			remove: []int{3, 2}, beyond: []int{2}, enough: true, need: 120},
		{name: "still too little: all but the newest go", r: KeepNewest(3), snaps: sized(1000, 10, 10), free: 0,
			remove: []int{2, 1}, beyond: []int{2, 1}, enough: false, need: 1200},
		{name: "only the newest", r: KeepNewest(3), snaps: sized(100), free: 0, enough: false, need: 120},
	} {
		t.Run(tc.name, func(t *testing.T) {
			room := tc.r.MakeRoom(tc.snaps, now, tc.free)
			pick := func(idx []int) []string {
				out := []string{}
				for _, i := range idx {
					out = append(out, tc.snaps[i].Name)
				}
				return out
			}
			assert.Equal(t, pick(tc.remove), names(room.Remove))
			assert.Equal(t, pick(tc.beyond), names(room.BeyondPolicy))
			assert.Equal(t, tc.enough, room.Enough)
			assert.Equal(t, tc.need, room.Need)
		})
	}
}

// FuzzRetention: for any snapshots and policy, Prune never panics, never removes the newest, never
// removes one twice or one not listed, and keeps at least what each rule says on its own (the
// newest Keep, and per tier the newest of each bucket); MakeRoom never removes the newest either.
func FuzzRetention(f *testing.F) {
	f.Add(uint8(24), uint8(7), uint8(4), uint8(0), uint8(3), []byte{1, 2, 3, 200, 7, 7})
	f.Add(uint8(0), uint8(0), uint8(0), uint8(0), uint8(0), []byte{})
	f.Add(uint8(1), uint8(1), uint8(1), uint8(1), uint8(1), []byte{255, 255, 0, 0})
	f.Fuzz(func(t *testing.T, hourlyN, daily, weekly, monthly, keep uint8, offsets []byte) {
		r := Retention{Keep: int(keep) % 50, Hourly: int(hourlyN) % 50, Daily: int(daily) % 20, Weekly: int(weekly) % 10, Monthly: int(monthly) % 13}
		var snaps []Snapshot
		var at time.Time = now.Add(2 * time.Hour) // some ahead of now
		for i, b := range offsets {
			at = at.Add(-time.Duration(b) * 7 * time.Minute) // 0 … ~30 h apart; equal times too
			snaps = append(snaps, Snapshot{Name: fmt.Sprintf("s%04d", len(offsets)-i), Taken: at, Size: int64(b)})
		}
		removed := r.Prune(snaps, now)
		gone := map[string]bool{}
		for _, s := range removed {
			require.False(t, gone[s.Name], "removed twice: %s", s.Name)
			gone[s.Name] = true
		}
		require.LessOrEqual(t, len(removed), len(snaps))
		if r.IsZero() {
			require.Empty(t, removed)
		}
		order := NewestFirst(snaps)
		if len(order) > 0 {
			require.False(t, gone[snaps[order[0]].Name], "the newest was removed")
		}
		for rank, i := range order {
			if rank < r.Keep {
				require.False(t, gone[snaps[i].Name], "one of the newest %d was removed", r.Keep)
			}
		}
		for _, ti := range r.tiers() {
			seen := map[int]bool{}
			for _, i := range order {
				taken := snaps[i].Taken
				if taken.After(now) {
					taken = now
				}
				if b := ti.bucket(taken, now); b < ti.n && !seen[b] {
					seen[b] = true
					require.False(t, gone[snaps[i].Name], "the newest of %s bucket %d was removed", ti.unit, b)
				}
			}
		}
		room := r.MakeRoom(snaps, now, int64(len(offsets)))
		for _, s := range room.Remove {
			require.NotEqual(t, snaps[order[0]].Name, s.Name, "MakeRoom removed the newest")
		}
		require.LessOrEqual(t, len(room.BeyondPolicy), len(room.Remove))
	})
}

func TestRetentionOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    *providersv1alpha1.BackupPolicy
		want Retention
	}{
		{name: "unset: the newest 24", want: KeepNewest(24)},
		{name: "keep only behaves as before", p: &providersv1alpha1.BackupPolicy{Keep: 5}, want: KeepNewest(5)},
		{name: "tiers without keep: the tiers alone", p: &providersv1alpha1.BackupPolicy{Retention: &providersv1alpha1.BackupRetention{Hourly: 24, Daily: 7}},
			want: Retention{Hourly: 24, Daily: 7}},
		{name: "tiers and keep", p: &providersv1alpha1.BackupPolicy{Keep: 3, Retention: &providersv1alpha1.BackupRetention{Weekly: 4, Monthly: 6}},
			want: Retention{Keep: 3, Weekly: 4, Monthly: 6}},
		{name: "empty retention is the flat count", p: &providersv1alpha1.BackupPolicy{Retention: &providersv1alpha1.BackupRetention{}}, want: KeepNewest(24)},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, RetentionOf(tc.p)) })
	}
}
