package v1alpha1_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSelectorValidate(t *testing.T) {
	const validOps = "ContainsAll, ContainsAny, ContainsNone, Equals"
	tests := map[string]struct {
		kinds []selectorKind
		yaml  string
		// wantErr is the whole message if exact, else substrings of it.
		wantErr     string
		exact       bool
		wantContain []string
	}{
		"identity without name": {
			kinds:   withIdentities,
			yaml:    "matchIdentities: [{name: a, namespace: x}, {namespace: default}]",
			wantErr: "matchIdentities[1].name must not be empty",
			exact:   true,
		},
		"unknown purpose operator": {
			kinds:   withPurposes,
			yaml:    "matchPurposes: [{operator: Foo, values: [mcp]}]",
			wantErr: `matchPurposes[0].operator "Foo" is not one of ` + validOps,
			exact:   true,
		},
		"missing purpose operator": {
			kinds:   withPurposes,
			yaml:    "matchPurposes: [{operator: Equals, values: [mcp]}, {values: [mcp]}]",
			wantErr: `matchPurposes[1].operator "" is not one of ` + validOps,
			exact:   true,
		},
		"purpose operators are case-sensitive": {
			kinds:   withPurposes,
			yaml:    "matchPurposes: [{operator: equals, values: [mcp]}]",
			wantErr: `matchPurposes[0].operator "equals" is not one of ` + validOps,
			exact:   true,
		},
		"empty purpose value": {
			kinds:   withPurposes,
			yaml:    `matchPurposes: [{operator: ContainsAny, values: [mcp, ""]}]`,
			wantErr: "matchPurposes[0].values[1] must not be empty",
			exact:   true,
		},
		"unknown label operator": {
			kinds:       withLabels,
			yaml:        "matchExpressions: [{key: foo, operator: Foo, values: [bar]}]",
			wantContain: []string{"matchExpressions[0].operator", `"Foo"`},
		},
		"label In without values": {
			kinds:       withLabels,
			yaml:        "matchExpressions: [{key: foo, operator: In}]",
			wantContain: []string{"matchExpressions[0].values"},
		},
		"label Exists with values": {
			kinds:       withLabels,
			yaml:        "matchExpressions: [{key: foo, operator: Exists, values: [bar]}]",
			wantContain: []string{"matchExpressions[0].values"},
		},
		"invalid label key": {
			kinds:       withLabels,
			yaml:        `matchLabels: {"not a key": bar}`,
			wantContain: []string{"matchLabels", "not a key"},
		},
		"invalid label value": {
			kinds:       withLabels,
			yaml:        `matchLabels: {foo: "not a value"}`,
			wantContain: []string{"matchLabels", "not a value"},
		},
		"every part's errors are joined": {
			kinds: []selectorKind{identityLabelPurposeKind},
			yaml: `
matchIdentities: [{name: ""}]
matchExpressions: [{key: foo, operator: Foo}]
matchPurposes: [{operator: Bar}]
`,
			wantContain: []string{
				"matchIdentities[0].name must not be empty",
				`matchExpressions[0].operator`, `"Foo"`,
				`matchPurposes[0].operator "Bar" is not one of ` + validOps,
			},
		},
	}
	for name, tt := range tests {
		for _, k := range tt.kinds {
			t.Run(name+"/"+k.name, func(t *testing.T) {
				sel := decode(t, k, tt.yaml)
				err := sel.Validate()
				require.Error(t, err)
				if tt.exact {
					assert.EqualError(t, err, tt.wantErr)
				}
				for _, s := range tt.wantContain {
					assert.ErrorContains(t, err, s)
				}
				assert.False(t, sel.Empty(), "an invalid selector restricts something")
				assert.Empty(t, matchedKeys(sel), "an invalid selector matches nothing")
			})
		}
	}
}

func TestAggregateInvalidPartNeverMatches(t *testing.T) {
	tests := map[string]struct {
		kind selectorKind
		// yaml is invalid; valid is the same selector without its invalid part.
		yaml, valid string
		wantValid   []string
	}{
		"identity overrides, but an invalid purpose part still wins": {
			kind:      identityPurposeKind,
			yaml:      "matchIdentities: [{name: myobject, namespace: default}]\nmatchPurposes: [{operator: Foo}]",
			valid:     "matchIdentities: [{name: myobject, namespace: default}]",
			wantValid: []string{"cluster default/myobject", "request default/myobject"},
		},
		"identity overrides, but an invalid label part still wins": {
			kind:      identityLabelKind,
			yaml:      "matchIdentities: [{name: foo, namespace: bar}]\nmatchExpressions: [{key: foo, operator: Foo}]",
			valid:     "matchIdentities: [{name: foo, namespace: bar}]",
			wantValid: []string{"cluster bar/foo"},
		},
		"invalid identity next to valid labels": {
			kind:      identityLabelPurposeKind,
			yaml:      "matchIdentities: [{namespace: default}]\nmatchLabels: {foo: bar}",
			valid:     "matchLabels: {foo: bar}",
			wantValid: []string{"cluster bar/foo", "cluster default/asdf", "cluster default/mcp-dup", "cluster /foo", "request default/myobject", "request default/no-purpose", "request bar/platform"},
		},
		"invalid labels next to valid purposes": {
			kind:      labelPurposeKind,
			yaml:      "matchExpressions: [{key: foo, operator: In}]\nmatchPurposes: [{operator: Equals, values: [mcp]}]",
			valid:     "matchPurposes: [{operator: Equals, values: [mcp]}]",
			wantValid: []string{"cluster default/myobject", "cluster default/mcp-dup", "request default/myobject"},
		},
		"empty-string purpose next to labels matching everything": {
			kind:      identityLabelPurposeKind,
			yaml:      "matchLabels: {}\nmatchPurposes: [{operator: ContainsNone, values: [\"\"]}]",
			valid:     "matchLabels: {}",
			wantValid: allKeys(),
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			valid := decode(t, tt.kind, tt.valid)
			require.NoError(t, valid.Validate())
			require.ElementsMatch(t, tt.wantValid, matchedKeys(valid), "the selector without its invalid part")

			sel := decode(t, tt.kind, tt.yaml)
			require.Error(t, sel.Validate())
			assert.Empty(t, matchedKeys(sel))
		})
	}
}

func TestAggregateEmpty(t *testing.T) {
	tests := map[string]struct {
		kind selectorKind
		yaml string
		want bool
	}{
		"nothing set":                       {identityLabelPurposeKind, "{}", true},
		"all parts explicitly empty":        {identityLabelPurposeKind, "{matchIdentities: null, matchLabels: {}, matchExpressions: [], matchPurposes: []}", true},
		"empty identity list":               {identityLabelPurposeKind, "matchIdentities: []", false},
		"labels only":                       {identityLabelPurposeKind, "matchLabels: {a: b}", false},
		"expressions only":                  {identityLabelPurposeKind, "matchExpressions: [{key: a, operator: Exists}]", false},
		"purposes only":                     {identityLabelPurposeKind, "matchPurposes: [{operator: ContainsAny, values: [a]}]", false},
		"identity with labels":              {identityLabelKind, "{matchIdentities: [{name: a}], matchLabels: {a: b}}", false},
		"identity with empty purposes":      {identityPurposeKind, "{matchIdentities: [{name: a}], matchPurposes: []}", false},
		"labels and purposes both empty":    {labelPurposeKind, "{matchLabels: {}, matchPurposes: []}", true},
		"labels empty, purposes set":        {labelPurposeKind, "{matchLabels: {}, matchPurposes: [{operator: Equals}]}", false},
		"empty identity list, empty labels": {identityLabelKind, "{matchIdentities: [], matchLabels: {}}", false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			sel := decode(t, tt.kind, tt.yaml)
			require.NoError(t, sel.Validate())
			assert.Equal(t, tt.want, sel.Empty())
			if tt.want {
				assert.ElementsMatch(t, allKeys(), matchedKeys(sel), "an Empty selector matches everything")
			}
		})
	}
}

func TestAggregateIdentityOverrides(t *testing.T) {
	// Labels and purposes that match everything (or nothing) are ignored once identities are set.
	tests := map[string]struct {
		yaml      string
		wantMatch []string
	}{
		"empty identity list beats labels matching everything": {
			yaml:      "{matchIdentities: [], matchLabels: {}}",
			wantMatch: nil,
		},
		"identity beats purposes matching nothing": {
			yaml:      "{matchIdentities: [{name: bare, namespace: default}], matchPurposes: [{operator: ContainsAny, values: [none]}]}",
			wantMatch: []string{"cluster default/bare"},
		},
		"identity beats labels and purposes matching nothing": {
			yaml:      "{matchIdentities: [{name: bare, namespace: default}], matchLabels: {absent: label}, matchPurposes: [{operator: Equals, values: [none]}]}",
			wantMatch: []string{"cluster default/bare"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			sel := decode(t, identityLabelPurposeKind, tt.yaml)
			require.NoError(t, sel.Validate())
			assert.ElementsMatch(t, tt.wantMatch, matchedKeys(sel))
		})
	}
}
