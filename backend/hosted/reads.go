package hosted

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// memoClient is a host's client for the Ensure. The ConfigMaps it reads or writes are kept in
// memory with their resourceVersion; a read is answered from memory when the host's cache, which
// watches only their metadata, shows that resourceVersion still: an Ensure of an unchanged control
// plane reads its record and configuration without a request. Anything else, and a ConfigMap the
// cache does not hold (not labelled LabelManagedBy, or just made), is read from the API server.
// Secrets cannot be watched: the operator may neither list nor watch Secrets
// (deploy/hosted/hosted_role.yaml; deploy/scope_test.go TestHostedReads), so nothing tells it that
// one changed. A Secret it read or wrote is answered from memory for secretRecheck after that, then
// read again: a Secret deleted or edited by someone else is seen at the first Ensure after that
// (it was seen only at the next Ensure before, which nothing in particular triggers either).
type memoClient struct {
	client.Client
	meta cache.Cache
	// secretRecheck is how long a Secret read or written is trusted; 0: read each time.
	secretRecheck time.Duration

	mu   sync.Mutex
	objs map[string]client.Object
	at   map[string]time.Time // when each was read or written
}

// memoKind is the kind of obj when memoClient keeps it, else "".
func memoKind(obj client.Object) string {
	switch obj.(type) {
	case *corev1.ConfigMap:
		return "ConfigMap"
	case *corev1.Secret:
		return "Secret"
	}
	return ""
}

func memoKey(kind string, key client.ObjectKey) string {
	return kind + "/" + key.Namespace + "/" + key.Name
}

// Get reads obj from memory when the cache shows it unchanged since it was last read or written.
func (m *memoClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	kind := memoKind(obj)
	if kind == "" || len(opts) > 0 {
		return m.Client.Get(ctx, key, obj, opts...)
	}
	k := memoKey(kind, key)
	if kind == "Secret" {
		if last := m.fresh(k); last != nil {
			copyInto(obj, last)
			return nil
		}
		return m.read(ctx, k, key, obj)
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
	if m.meta.Get(ctx, key, meta) == nil {
		m.mu.Lock()
		last := m.objs[k]
		m.mu.Unlock()
		if last != nil && last.GetResourceVersion() == meta.ResourceVersion {
			copyInto(obj, last)
			return nil
		}
	}
	return m.read(ctx, k, key, obj)
}

// fresh is the Secret kept under k when it was read or written less than secretRecheck ago.
func (m *memoClient) fresh(k string) client.Object {
	m.mu.Lock()
	defer m.mu.Unlock()
	if last := m.objs[k]; last != nil && time.Since(m.at[k]) < m.secretRecheck {
		return last
	}
	return nil
}

// read reads obj from the API server and keeps it (or forgets it when it is gone).
func (m *memoClient) read(ctx context.Context, k string, key client.ObjectKey, obj client.Object) error {
	err := m.Client.Get(ctx, key, obj)
	switch {
	case apierrors.IsNotFound(err):
		m.drop(k)
	case err == nil:
		m.keep(k, obj)
	}
	return err
}

// copyInto sets obj (a ConfigMap) to a copy of from, of the same kind.
func copyInto(obj, from client.Object) {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		from.(*corev1.ConfigMap).DeepCopyInto(o)
	case *corev1.Secret:
		from.(*corev1.Secret).DeepCopyInto(o)
	}
}

// Create creates obj and keeps what the API server answered.
func (m *memoClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	err := m.Client.Create(ctx, obj, opts...)
	m.after(obj, err, len(opts) == 0)
	return err
}

// Update updates obj and keeps what the API server answered.
func (m *memoClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	err := m.Client.Update(ctx, obj, opts...)
	m.after(obj, err, len(opts) == 0)
	return err
}

// Patch patches obj and keeps what the API server answered.
func (m *memoClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	err := m.Client.Patch(ctx, obj, patch, opts...)
	m.after(obj, err, len(opts) == 0)
	return err
}

// Delete deletes obj and forgets it.
func (m *memoClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if kind := memoKind(obj); kind != "" {
		m.drop(memoKey(kind, client.ObjectKeyFromObject(obj)))
	}
	return m.Client.Delete(ctx, obj, opts...)
}

// after keeps obj as written (plain: not a dry run, no other option), or forgets it on an error.
func (m *memoClient) after(obj client.Object, err error, plain bool) {
	kind := memoKind(obj)
	if kind == "" {
		return
	}
	k := memoKey(kind, client.ObjectKeyFromObject(obj))
	if err != nil || !plain {
		m.drop(k)
		return
	}
	m.keep(k, obj)
}

func (m *memoClient) keep(k string, obj client.Object) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.objs == nil {
		m.objs, m.at = map[string]client.Object{}, map[string]time.Time{}
	}
	m.objs[k] = obj.DeepCopyObject().(client.Object)
	m.at[k] = time.Now()
}

func (m *memoClient) drop(k string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, k)
	delete(m.at, k)
}

// forget drops what is kept of namespace ns (deleted).
func (m *memoClient) forget(ns string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, o := range m.objs {
		if o.GetNamespace() == ns {
			delete(m.objs, k)
			delete(m.at, k)
		}
	}
}
