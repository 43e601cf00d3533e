package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/openmcp-local/cluster-provider/controllers/scheduler"
)

func TestLoadConfig(t *testing.T) {
	tests := map[string]struct {
		yaml    string
		wantErr []string   // substrings; none means valid
		match   labels.Set // must match the AccessRequest selector
		noMatch labels.Set // must not match it
	}{
		"empty file":            {yaml: "", match: labels.Set{"any": "thing"}},
		"no accessRequest":      {yaml: "{}\n", match: labels.Set{}},
		"empty accessRequest":   {yaml: "accessRequest: {}\n", match: labels.Set{"a": "b"}},
		"empty selector":        {yaml: "accessRequest:\n  selector: {}\n", match: labels.Set{"a": "b"}},
		"matchLabels":           {yaml: "accessRequest:\n  selector:\n    matchLabels: {shard: a}\n", match: labels.Set{"shard": "a"}, noMatch: labels.Set{"shard": "b"}},
		"matchExpressions":      {yaml: "accessRequest:\n  selector:\n    matchExpressions:\n    - {key: shard, operator: In, values: [a, b]}\n", match: labels.Set{"shard": "b"}, noMatch: labels.Set{}},
		"unknown top field":     {yaml: "accessRequests: {}\n", wantErr: []string{`unknown field "accessRequests"`}},
		"unknown nested field":  {yaml: "accessRequest:\n  selectr: {}\n", wantErr: []string{`unknown field "accessRequest.selectr"`}},
		"unknown selector key":  {yaml: "accessRequest:\n  selector:\n    matchLabel: {a: b}\n", wantErr: []string{`unknown field "accessRequest.selector.matchLabel"`}},
		"field name case":       {yaml: "AccessRequest: {}\n", wantErr: []string{`unknown field "AccessRequest"`}},
		"duplicate field":       {yaml: "accessRequest: {}\naccessRequest: {}\n", wantErr: []string{`"accessRequest"`}},
		"wrong type":            {yaml: "accessRequest: [a]\n", wantErr: []string{"accessRequest"}},
		"not yaml":              {yaml: "accessRequest: {\n", wantErr: []string{"yaml"}},
		"bad operator":          {yaml: "accessRequest:\n  selector:\n    matchExpressions:\n    - {key: shard, operator: Like, values: [a]}\n", wantErr: []string{"accessRequest.selector.matchExpressions[0].operator"}},
		"In without values":     {yaml: "accessRequest:\n  selector:\n    matchExpressions:\n    - {key: shard, operator: In}\n", wantErr: []string{"accessRequest.selector.matchExpressions[0].values"}},
		"bad label key":         {yaml: "accessRequest:\n  selector:\n    matchLabels: {'not a key': a}\n", wantErr: []string{"accessRequest.selector.matchLabels"}},
		"every problem counted": {yaml: "accessRequest:\n  selector:\n    matchExpressions:\n    - {key: a, operator: Like}\n    - {key: b, operator: Exists, values: [x]}\n", wantErr: []string{"matchExpressions[0].operator", "matchExpressions[1].values"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tt.yaml), 0o600))
			c, err := loadConfig(path)
			if len(tt.wantErr) > 0 {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "--config "+path)
				for _, want := range tt.wantErr {
					assert.Contains(t, err.Error(), want)
				}
				return
			}
			require.NoError(t, err)
			sel, err := c.AccessRequestSelector()
			require.NoError(t, err)
			assert.True(t, sel.Matches(tt.match), "should match %v", tt.match)
			if tt.noMatch != nil {
				assert.False(t, sel.Matches(tt.noMatch), "should not match %v", tt.noMatch)
			}
		})
	}
}

func TestLoadSchedulerConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
scheduler:
  purposeMappings:
    mcp:
      template:
        spec: {profile: default.local.p, tenancy: Exclusive}
`), 0o600))
	c, err := loadConfig(path)
	require.NoError(t, err)
	require.NotNil(t, c.Scheduler)
	assert.Equal(t, scheduler.ScopeCluster, c.Scheduler.Scope, "defaulted")
	assert.Equal(t, scheduler.StrategyBalanced, c.Scheduler.Strategy, "defaulted")
	assert.NoError(t, c.checkControllers(map[string]bool{controllerScheduler: true}, path))

	require.NoError(t, os.WriteFile(path, []byte("scheduler:\n  purposeMapings: {}\n"), 0o600))
	_, err = loadConfig(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown field "scheduler.purposeMapings"`)
}

// TestSampleConfig loads the --config `make run` passes: it enables the scheduler.
func TestSampleConfig(t *testing.T) {
	c, err := loadConfig(filepath.Join("..", "..", "deploy", "samples", "config", "operator.yaml"))
	require.NoError(t, err)
	require.NotNil(t, c.Scheduler)
	assert.NoError(t, c.checkControllers(map[string]bool{controllerScheduler: true}, "operator.yaml"))
	assert.ElementsMatch(t, []string{"shared", "exclusive"}, slices.Collect(maps.Keys(c.Scheduler.PurposeMappings)))
}

func TestLoadConfigWithoutFile(t *testing.T) {
	c, err := loadConfig("")
	require.NoError(t, err)
	sel, err := c.AccessRequestSelector()
	require.NoError(t, err)
	assert.True(t, sel.Empty(), "no --config selects every AccessRequest")

	_, err = loadConfig(filepath.Join(t.TempDir(), "missing.yaml"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--config")
	assert.Contains(t, err.Error(), "missing.yaml")
}
