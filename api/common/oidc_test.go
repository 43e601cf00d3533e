package common

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestOIDCProviderConfigDefault(t *testing.T) {
	tests := []struct {
		name string
		in   OIDCProviderConfig
		want OIDCProviderConfig
	}{
		{
			name: "empty claims get their defaults, empty prefixes stay empty",
			in:   OIDCProviderConfig{Name: "p"},
			want: OIDCProviderConfig{Name: "p", UsernameClaim: "sub", GroupsClaim: "groups"},
		},
		{
			name: "prefixes without a colon get one",
			in:   OIDCProviderConfig{UsernamePrefix: "user", GroupsPrefix: "group"},
			want: OIDCProviderConfig{UsernameClaim: "sub", GroupsClaim: "groups", UsernamePrefix: "user:", GroupsPrefix: "group:"},
		},
		{
			name: "the spec example is kept as it is",
			in:   OIDCProviderConfig{UsernameClaim: "sub", UsernamePrefix: "my-user:", GroupsClaim: "group", GroupsPrefix: "my-group:"},
			want: OIDCProviderConfig{UsernameClaim: "sub", UsernamePrefix: "my-user:", GroupsClaim: "group", GroupsPrefix: "my-group:"},
		},
		{
			name: "a colon inside a prefix is not its end",
			in:   OIDCProviderConfig{UsernamePrefix: "a:b", GroupsPrefix: ":"},
			want: OIDCProviderConfig{UsernameClaim: "sub", GroupsClaim: "groups", UsernamePrefix: "a:b:", GroupsPrefix: ":"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in
			assert.Same(t, &got, got.Default(), "Default returns its receiver")
			assert.Equal(t, tt.want, got)
			again := got
			again.Default()
			assert.Equal(t, got, again, "Default is idempotent")
		})
	}
}

func TestOIDCProviderConfigDefaultNil(t *testing.T) {
	var c *OIDCProviderConfig
	assert.Nil(t, c.Default())
}
