package cluster

import (
	"testing"

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
			assert.Equal(t, tc.want, names(withNewest(tc.before, snap(tc.taken), tc.keep)))
		})
	}
}
