package labeller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

func TestConfig(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string // substring; empty means valid
		match   labels.Set
		noMatch labels.Set
	}{
		{name: "no section", yaml: "", match: labels.Set{"any": "thing"}},
		{name: "no selector", yaml: "{}", match: labels.Set{}},
		{name: "empty selector matches everything", yaml: "selector: {}", match: labels.Set{"a": "b"}},
		{
			name:    "matchLabels",
			yaml:    "selector:\n  matchLabels:\n    shard: a\n",
			match:   labels.Set{"shard": "a", "x": "y"},
			noMatch: labels.Set{"shard": "b"},
		},
		{
			name:    "matchExpressions",
			yaml:    "selector:\n  matchExpressions:\n  - {key: shard, operator: NotIn, values: [b]}\n",
			match:   labels.Set{},
			noMatch: labels.Set{"shard": "b"},
		},
		{
			name:    "unknown operator",
			yaml:    "selector:\n  matchExpressions:\n  - {key: shard, operator: Like, values: [a]}\n",
			wantErr: "accessRequest.selector.matchExpressions[0].operator",
		},
		{
			name:    "In without values",
			yaml:    "selector:\n  matchExpressions:\n  - {key: shard, operator: In}\n",
			wantErr: "accessRequest.selector.matchExpressions[0].values",
		},
		{
			name:    "invalid label key",
			yaml:    "selector:\n  matchLabels:\n    'not a key': a\n",
			wantErr: "accessRequest.selector.matchLabels",
		},
		{
			name:    "invalid label value",
			yaml:    "selector:\n  matchLabels:\n    shard: 'a b'\n",
			wantErr: "accessRequest.selector.matchLabels",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c *Config
			if tt.yaml != "" {
				c = &Config{}
				require.NoError(t, yaml.UnmarshalStrict([]byte(tt.yaml), c))
			}
			sel, selErr := c.AsSelector()
			err := c.Validate()
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				require.Error(t, selErr, "AsSelector rejects what Validate rejects")
				assert.Contains(t, selErr.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.NoError(t, selErr)
			assert.True(t, sel.Matches(tt.match), "should match %v", tt.match)
			if tt.noMatch != nil {
				assert.False(t, sel.Matches(tt.noMatch), "should not match %v", tt.noMatch)
			}
		})
	}
}

func TestConfigValidateNamesEveryProblem(t *testing.T) {
	c := &Config{Selector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"ok": "a b"},
		MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "k", Operator: metav1.LabelSelectorOpExists, Values: []string{"x"}},
		},
	}}
	err := c.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "accessRequest.selector.matchLabels")
	assert.Contains(t, err.Error(), "accessRequest.selector.matchExpressions[0].values")
}
