package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/openmcp-local/cluster-provider/backend"
)

func TestWithNewest(t *testing.T) {
	snap := func(name string) backend.Snapshot { return backend.Snapshot{Name: name} }
	names := func(ss []backend.Snapshot) []string {
		out := []string{}
		for _, s := range ss {
			out = append(out, s.Name)
		}
		return out
	}
	for name, tc := range map[string]struct {
		before []backend.Snapshot
		taken  string
		keep   int
		want   []string
	}{
		"the first":                {taken: "20261127T120000Z", keep: 3, want: []string{"20261127T120000Z"}},
		"newest first":             {before: []backend.Snapshot{snap("b"), snap("a")}, taken: "c", keep: 3, want: []string{"c", "b", "a"}},
		"the oldest beyond keep":   {before: []backend.Snapshot{snap("c"), snap("b"), snap("a")}, taken: "d", keep: 3, want: []string{"d", "c", "b"}},
		"listed already, once":     {before: []backend.Snapshot{snap("b"), snap("a")}, taken: "b", keep: 3, want: []string{"b", "a"}},
		"keep 0 keeps every one":   {before: []backend.Snapshot{snap("a")}, taken: "b", keep: 0, want: []string{"b", "a"}},
		"keep 1 keeps the new one": {before: []backend.Snapshot{snap("a")}, taken: "b", keep: 1, want: []string{"b"}},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, names(withNewest(tc.before, snap(tc.taken), backend.KeepNewest(tc.keep), time.Now())))
		})
	}
	t.Run("removed for space and by age tiers", func(t *testing.T) {
		now := time.Date(2026, 11, 27, 12, 30, 0, 0, time.UTC)
		at := func(name string, ago time.Duration) backend.Snapshot {
			return backend.Snapshot{Name: name, Taken: now.Add(-ago)}
		}
		taken := at("e", 0)
		taken.RemovedForSpace = []string{"a"}
		before := []backend.Snapshot{at("d", 10*time.Minute), at("c", time.Hour), at("b", 2*time.Hour), at("a", 3*time.Hour)}
		// Hourly 2: e (this hour) and c (the last); d shares e's hour, b is older; a went for space.
		assert.Equal(t, []string{"e", "c"}, names(withNewest(before, taken, backend.Retention{Hourly: 2}, now)))
	})
}

// TestUnchangedSince: a scheduled snapshot of a hibernated cluster is skipped only when the
// newest snapshot is from after the hibernation began (nothing changed since).
func TestUnchangedSince(t *testing.T) {
	slept := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	snap := func(at time.Time) []backend.Snapshot { return []backend.Snapshot{{Name: "n", Taken: at}} }
	for name, tc := range map[string]struct {
		since *time.Time
		snaps []backend.Snapshot
		want  bool
	}{
		"awake":                         {since: nil, snaps: snap(slept.Add(time.Hour)), want: false},
		"hibernated, no snapshot":       {since: &slept, want: false},
		"hibernated, snapshot before":   {since: &slept, snaps: snap(slept.Add(-time.Second)), want: false},
		"hibernated, snapshot at it":    {since: &slept, snaps: snap(slept), want: true},
		"hibernated, snapshot after it": {since: &slept, snaps: snap(slept.Add(time.Minute)), want: true},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, unchangedSince(backend.State{HibernatedSince: tc.since}, tc.snaps))
		})
	}
}
