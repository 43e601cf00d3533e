package local

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
)

// providerStatus is status.providerStatus of a local cluster.
type providerStatus struct {
	Backend  string     `json:"backend"`
	Version  string     `json:"version"`
	Ports    ports      `json:"ports"`
	Restarts int        `json:"restarts"`
	DataLost *time.Time `json:"dataLost,omitempty"`
	// ServiceCIDR is the cluster's service range (so that a lost record is rebuilt with it).
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// Encryption is the state of its encryption at rest (no secret).
	Encryption *encryption.Status `json:"encryption,omitempty"`
}

// state is what in observes of its cluster: the API server's readiness, the controller
// manager's and etcd's parts, and the loss of its data (a Provisioned part, for the cluster's
// life).
func (in *instance) state() backend.State {
	in.mu.Lock()
	defer in.mu.Unlock()
	url := endpoint(in.b.opts.AdvertiseHost, in.meta.Ports.APIServer)
	version := in.version
	if version == "" {
		version = in.bins.Version
	}
	s := backend.State{
		Ready:     in.api.Ready,
		Reason:    in.api.Reason,
		Message:   in.api.Message,
		Endpoint:  url,
		Endpoints: map[string]string{backend.EndpointAPIServerExternal: url},
		CABundle:  in.pki.CAPEM,
		Version:   in.version,
		Runs:      in.meta.Version,
		Info:      fmt.Sprintf("%s v%s :%d", Name, version, in.meta.Ports.APIServer),
		ProviderStatus: providerStatus{
			Backend: Name, Version: "v" + in.meta.Version, Ports: in.meta.Ports, Restarts: in.restarts, DataLost: in.meta.DataLost,
			ServiceCIDR: in.meta.serviceCIDR(), Encryption: in.encryptionStatusLocked(),
		},
		Restored: in.meta.Restored,
	}
	kcm := in.kcm.Part
	kcm.Type = backend.PartControllerManager
	s.SetPart(kcm)
	etcd := backend.Part{Ready: true, Reason: backend.ReasonRunning, Message: "No alarm: etcd's database is below its quota."}
	if in.etcdPart != nil {
		etcd = *in.etcdPart
	}
	etcd.Type = backend.PartEtcd
	s.SetPart(etcd)
	s.SetPart(in.certificatesPartLocked(time.Now()))
	if lost := in.dataLostLocked(); lost != "" {
		s.SetPart(backend.Part{Type: backend.PartProvisioned, Ready: true, Reason: backend.ReasonDataLost, Message: lost})
	}
	if h, ok := in.hibernationPartLocked(); ok {
		s.SetPart(h)
	}
	switch {
	case in.asleepLocked():
		// Its endpoint answers: the first request wakes it.
		since := in.meta.Hibernated.Since
		s.HibernatedSince = &since
		s.Ready, s.Reason = true, backend.ReasonHibernated
		s.Message = "The cluster is hibernated: its endpoint " + url + " answers, and the first request wakes kube-apiserver " + in.bins.Version + " (condition Hibernated)."
		s.SetPart(backend.Part{Type: backend.PartControllerManager, Ready: true, Reason: backend.ReasonHibernated,
			Message: "kube-controller-manager " + in.bins.Version + " is hibernated with the cluster; it starts when the cluster wakes."})
		s.SetPart(backend.Part{Type: backend.PartEtcd, Ready: true, Reason: backend.ReasonHibernated,
			Message: "etcd is stopped with its data; it starts first when the cluster wakes."})
	case in.woken && (!in.api.Ready || !in.kcm.Ready):
		// Requests wait for it at the endpoint: the cluster stays Ready for its consumers.
		if !in.api.Ready {
			s.Ready, s.Reason, s.Message = true, backend.ReasonWaking, in.api.Message
		}
		if !in.kcm.Ready {
			s.SetPart(backend.Part{Type: backend.PartControllerManager, Ready: true, Reason: backend.ReasonWaking, Message: in.kcm.Message})
		}
		s.RetryAfter = retryNotReady
	case !in.api.Ready || !in.kcm.Ready:
		s.RetryAfter = retryNotReady
	}
	return s
}

// dataLostLocked says, when the record says the cluster's data was lost, what was lost, when,
// and what to do; else "".
func (in *instance) dataLostLocked() string {
	t := in.meta.DataLost
	switch {
	case t == nil:
		return ""
	case in.meta.LostPart == lostEtcd:
		return fmt.Sprintf("The cluster's etcd data folder %s was gone at %s although the cluster had run: etcd was started anew, EMPTY, with the cluster's CA, ports and kubeconfigs. "+
			"To bring back a backup of that folder, stop the operator, put it in place and start the operator again; this condition stays as a record.",
			filepath.Join(in.dir, etcdDataDir), t.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("The cluster's folder %s was gone at %s although the cluster had run (a lost volume?): the cluster was created anew, EMPTY, with a new CA; "+
		"its AccessRequests are granted again with new kubeconfigs. Restore nothing into it from the old folder: keep the state dir on a persistent volume (deploy/default does).",
		in.dir, t.UTC().Format(time.RFC3339))
}
