package labeller

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	apischeme "github.com/openmcp-local/cluster-provider/api/scheme"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

var fuzzScheme = apischeme.New()

// FuzzResolve follows an AccessRequest's references (spec as JSON) through a cache holding a
// ClusterRequest, a Cluster and a ClusterProfile (their status and spec as JSON) and checks the
// labels the request would get (existing labels as JSON): resolve and checkLabels never panic,
// every outcome short of a target is a reason the AccessRequest reports, with a message, and a
// target's label values are valid labels. `make fuzz` runs it.
func FuzzResolve(f *testing.F) {
	f.Add([]byte(`{"clusterRef":{"name":"c"}}`), []byte(`{}`), []byte(`{"profile":"p"}`), []byte(`{"providerRef":{"name":"prov"}}`), []byte(`{}`))
	f.Add([]byte(`{"requestRef":{"name":"r"}}`), []byte(`{"phase":"Granted","cluster":{"name":"c","namespace":"ns"}}`), []byte(`{"profile":"p"}`), []byte(`{"providerRef":{"name":"prov"}}`), []byte(`{"clusters.openmcp.cloud/provider":"other"}`))
	f.Add([]byte(`{"requestRef":{"name":"r"}}`), []byte(`{"phase":"Denied"}`), []byte(`{}`), []byte(`{}`), []byte(`{}`))
	f.Add([]byte(`{"requestRef":{"name":"r"}}`), []byte(`{"phase":"Granted"}`), []byte(`{}`), []byte(`{}`), []byte(`{}`))
	f.Add([]byte(`{}`), []byte(`{}`), []byte(`{}`), []byte(`{}`), []byte(`{}`))
	f.Add([]byte(`{"clusterRef":{"name":"c"}}`), []byte(`{}`), []byte(`{"profile":"p"}`), []byte(`{"providerRef":{"name":"a b/c"}}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, arSpec, crStatus, clSpec, profileSpec, existing []byte) {
		ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ar"}}
		cr := &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"}}
		cl := &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
		profile := &clustersv1alpha1.ClusterProfile{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
		var labels map[string]string
		for _, u := range []struct {
			data []byte
			into any
		}{{arSpec, &ar.Spec}, {crStatus, &cr.Status}, {clSpec, &cl.Spec}, {profileSpec, &profile.Spec}, {existing, &labels}} {
			if json.Unmarshal(u.data, u.into) != nil {
				return
			}
		}
		r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(fuzzScheme).WithObjects(cr, cl, profile).Build()}
		tg, err := r.resolve(t.Context(), ar)
		if err != nil {
			requireReason(t, err)
			return
		}
		for _, l := range tg.labels() {
			if errs := validation.IsValidLabelValue(l.value); len(errs) > 0 {
				t.Fatalf("resolved label %s=%q is not a label value: %v", l.key, l.value, errs)
			}
		}
		if err := checkLabels(labels, tg); err != nil {
			requireReason(t, err)
			if kit.ReasonOf(err, "") != ReasonLabelConflict {
				t.Fatalf("checkLabels: %v", err)
			}
		}
	})
}

// requireReason fails unless err is one the AccessRequest reports: a labeller reason and a message.
func requireReason(t *testing.T, err error) {
	t.Helper()
	switch kit.ReasonOf(err, "") {
	case ReasonNoReference, ReasonClusterRequestNotFound, ReasonWaitingForClusterRequest, ReasonClusterRequestDenied,
		ReasonClusterNotFound, ReasonClusterProfileNotFound, ReasonInvalidLabelValue, ReasonLabelConflict:
	default:
		t.Fatalf("an outcome without a reason the AccessRequest can report: %v", err)
	}
	if strings.TrimSpace(err.Error()) == "" {
		t.Fatal("a reason without a message")
	}
}
