package accessrequest

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
)

// AnnotationGrantsSwept on a Cluster records the last restore (or loss of data) of its cluster
// after which the grant sweep ran (SweepMarker): the sweep is due again when the Cluster reports
// another one. It survives a restart of the operator; removing it only makes the sweep run again.
const AnnotationGrantsSwept = "accessrequest.clusters.openmcp.cloud/grants-swept"

// ReasonGrantsSwept is the reason of the Cluster's Event that says what the grant sweep removed
// from the cluster and which requests it has granted again.
const ReasonGrantsSwept = "GrantsSwept"

// SweepMarker identifies the last event after which cl's cluster may hold grants of
// AccessRequests that are gone, or lack grants of those that exist: a restore done (condition
// Restored True, reason RestoreDone) and a cluster made anew because its data was lost
// (condition Provisioned, reason DataLost). "" when there was none. Each such condition's
// message names its event (the snapshot and when it was restored; when the data was found
// gone), so the marker is the reason, the transition time and a hash of the message of each.
func SweepMarker(cl *clustersv1alpha1.Cluster) string {
	var parts []string
	mark := func(condType, reason string, status metav1.ConditionStatus) {
		c := meta.FindStatusCondition(cl.Status.Conditions, condType)
		if c == nil || c.Reason != reason || c.Status != status {
			return
		}
		sum := sha256.Sum256([]byte(c.Message))
		parts = append(parts, reason+"."+strconv.FormatInt(c.LastTransitionTime.Unix(), 10)+"."+hex.EncodeToString(sum[:6]))
	}
	mark(cluster.ConditionRestored, cluster.ReasonRestoreDone, metav1.ConditionTrue)
	mark(cluster.ConditionProvisioned, cluster.ReasonDataLost, metav1.ConditionTrue)
	return strings.Join(parts, ",")
}

// grantRef is one object the cluster holds with this operator's request labels: what the sweep
// reads of it to judge whether its AccessRequest still exists.
type grantRef struct {
	// kind is its entry of kinds; namespace and name say which object it is.
	kind, namespace, name string
	uid                   types.UID
	// labels and annotations are the object's.
	labels, annotations map[string]string
}

// request is the key of the AccessRequest o was made for, as its labels and annotations say: the
// annotation holds namespace/name whole, the labels hold the name only when it is short.
func (o grantRef) request() client.ObjectKey {
	if ns, name, ok := strings.Cut(o.annotations[AnnotationRequestName], "/"); ok {
		return client.ObjectKey{Namespace: ns, Name: name}
	}
	return client.ObjectKey{Namespace: o.labels[LabelRequestNamespace], Name: o.labels[LabelRequestName]}
}

func (o grantRef) String() string { return o.kind + " " + qualified(o.namespace, o.name) }

// verdict is what the sweep does with a grant.
type verdict int

const (
	// keep: its AccessRequest exists and is for this cluster.
	keep verdict = iota
	// unmatched: it carries the labels, but its RequestID is not the one this operator gives the
	// request its labels name (another environment or provider, or labels edited by hand): it
	// is not this operator's to judge, and is left alone.
	unmatched
	// orphan: made by this operator for an AccessRequest that no longer exists, or that was
	// deleted and made again (another UID): it is deleted.
	orphan
)

// judge decides what becomes of o. ar is the AccessRequest o's labels name, nil when it does not
// exist. environment and provider are this operator's, for RequestID. A request's clusterRef is
// immutable: its grants are only ever in its own cluster.
func judge(o grantRef, ar *clustersv1alpha1.AccessRequest, environment, provider string) verdict {
	key := o.request()
	if key.Namespace == "" || key.Name == "" || RequestID(environment, provider, key.Namespace, key.Name) != o.labels[LabelRequestID] {
		return unmatched
	}
	switch {
	case ar == nil:
		return orphan
	case o.labels[LabelRequestUID] != "" && o.labels[LabelRequestUID] != string(ar.UID):
		return orphan // made for an earlier request of the same name: its tokens must not work
	}
	return keep
}
