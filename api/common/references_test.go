package common

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
)

func TestObjectReferenceKey(t *testing.T) {
	tests := []struct {
		ref  ObjectReference
		want types.NamespacedName
	}{
		{ObjectReference{Name: "c"}, types.NamespacedName{Namespace: "referrer", Name: "c"}},
		{ObjectReference{Name: "c", Namespace: "other"}, types.NamespacedName{Namespace: "other", Name: "c"}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.ref.Key("referrer"))
	}
}
