package manager

import (
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// keyedMutex serializes operations per key; operations on different keys do not wait for each
// other. Entries are removed when no one holds or waits for them.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*refMutex
}

type refMutex struct {
	sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*refMutex{}
	}
	m := k.locks[key]
	if m == nil {
		m = &refMutex{}
		k.locks[key] = m
	}
	m.refs++
	k.mu.Unlock()

	m.Lock()
	return func() {
		m.Unlock()
		k.mu.Lock()
		if m.refs--; m.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// newList returns an empty list object for obj's kind.
func newList(scheme *runtime.Scheme, obj client.Object) (client.ObjectList, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return nil, err
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List") + "List"
	o, err := scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("no list type for %s: %w", gvk, err)
	}
	l, ok := o.(client.ObjectList)
	if !ok {
		return nil, fmt.Errorf("%s is not a client.ObjectList", gvk)
	}
	return l, nil
}

// forEachKey calls fn with a request for each item of list.
func forEachKey(list client.ObjectList, fn func(reconcile.Request)) error {
	return meta.EachListItem(list, func(o runtime.Object) error {
		m, err := meta.Accessor(o)
		if err != nil {
			return err
		}
		fn(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}})
		return nil
	})
}
