package hosted

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// The identities of the client certificates in every hosted cluster: the operator's, the
// controller manager's and the API server's towards its etcd.
const (
	adminUser  = "openmcp:cluster-provider"
	adminGroup = "system:masters"
	kcmUser    = "system:kube-controller-manager"
	etcdUser   = "kube-apiserver-etcd-client"
)

// pki is the key material of one control plane, as kept in its Secrets.
type pki struct {
	// cluster and etcd are the cluster CA and etcd's, each with its rotation (carotation.go).
	cluster, etcd *rotatingCA
	ca, etcdCA    *certs.CA // the signing CAs: cluster.ca, etcd.ca
	// Trust is the checksum of both trust bundles (trustOf); Held, when set, says what keeps a
	// CA rotation from its next phase.
	Trust, Held string
	// Admin authenticates the operator (adminUser in system:masters).
	AdminCert, AdminKey []byte
	// NotAfter is when each leaf ends, by its Secret's name.
	NotAfter map[string]time.Time
	// RenewAt is when the first of them is due to be issued anew.
	RenewAt time.Time
	// Checksum changes when a leaf the API server's pod mounts (serving, etcd client, the
	// controller manager's kubeconfig) is issued anew: the pod template carries it, so a renewal
	// rolls the Deployment and every process runs with the new certificate.
	Checksum string
}

// leaf records a leaf certificate of Secret name: its end and, if the API server's pod mounts it,
// its part of the checksum.
func (p *pki) leaf(name string, certPEM []byte, mounted bool, ca *certs.CA, sum *[]string) {
	t, err := certs.NotAfter(certPEM)
	if err != nil {
		return
	}
	p.NotAfter[name] = t
	// A leaf that ends with its CA (certs.CA.Issue clamps it) is kept to its end: the next CA
	// issues it anew when a rotation makes it sign (ensureCA).
	if at := ca.LeafRenewAt(t); p.RenewAt.IsZero() || at.Before(p.RenewAt) {
		p.RenewAt = at
	}
	if mounted {
		*sum = append(*sum, string(certPEM))
	}
}

// ensurePKI makes the control plane's Secrets in s.Namespace: CAs and the service-account key are
// made once and never replaced (a CA Secret that does not read stops here with StateDamaged: every
// kubeconfig of the cluster depends on it); a leaf certificate is issued anew only when it is
// missing, does not verify, is close to its end, or lacks one of servingHosts.
//
// It runs at every reconcile: a leaf due for renewal (life's RenewBefore its end) or deleted is
// issued anew at the next one, and the returned RenewAt says when to come back at the latest.
func ensurePKI(ctx context.Context, c client.Client, s *Spec, servingHosts []string, life certs.Lifetime, settled func(trust string) string) (*pki, error) {
	p, err := ensureCAs(ctx, c, s, life, settled)
	if err != nil {
		return nil, err
	}
	var sum []string
	if err := ensureSecret(ctx, c, s, SecretServiceAcct, func(cur map[string][]byte) (map[string][]byte, error) {
		if len(cur["sa.key"]) > 0 && len(cur["sa.pub"]) > 0 {
			return nil, nil
		}
		key, pub, err := certs.NewServiceAccountKey()
		return map[string][]byte{"sa.key": key, "sa.pub": pub}, err
	}); err != nil {
		return nil, err
	}
	// The etcd server's certificate is not in the checksum: etcd reads its certificate files at
	// every TLS handshake, and the kubelet updates the mounted Secret, so it needs no restart.
	leaves := leavesOf(s, p, servingHosts)
	for _, l := range leaves {
		cert, key, err := ensureLeaf(ctx, c, s, l.secret, l.ca, l.leaf)
		if err != nil {
			return nil, err
		}
		p.leaf(l.secret, cert, l.mounted, l.ca.ca, &sum)
		if l.secret == SecretAdmin {
			p.AdminCert, p.AdminKey = cert, key
		}
	}
	kcm := certs.Leaf{CommonName: kcmUser, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	var kcmConfig []byte
	if err := ensureSecret(ctx, c, s, SecretKCMKubeconf, func(cur map[string][]byte) (map[string][]byte, error) {
		if keepKubeconfig(cur["kubeconfig"], p.ca, p.cluster.bundle(), kcm) {
			kcmConfig = cur["kubeconfig"]
			return nil, nil
		}
		cert, key, err := p.ca.Issue(kcm)
		if err != nil {
			return nil, err
		}
		// The controller manager runs in the API server's pod: it calls it on the loopback.
		kc, err := kubeconfig(fmt.Sprintf("https://127.0.0.1:%d", PortAPIServer), p.cluster.bundle(), cert, key)
		kcmConfig = kc
		return map[string][]byte{"kubeconfig": kc}, err
	}); err != nil {
		return nil, err
	}
	p.leaf(SecretKCMKubeconf, kubeconfigCert(kcmConfig), true, p.ca, &sum)
	p.Checksum = hashOf(sum)
	return p, nil
}

// ensureCAs makes or reads the cluster CA and etcd's, and moves their rotations on when their
// time has come and settled (called with the checksum of the bundles that run now) says nothing
// keeps them.
func ensureCAs(ctx context.Context, c client.Client, s *Spec, life certs.Lifetime, settled func(trust string) string) (*pki, error) {
	p := &pki{NotAfter: map[string]time.Time{}}
	// What runs now: both CAs as they are, before any moves.
	cluster, err := ensureCA(ctx, c, s, SecretCA, "kubernetes", life, nil)
	if err != nil {
		return nil, err
	}
	etcd, err := ensureCA(ctx, c, s, SecretEtcdCA, "etcd-ca", life, nil)
	if err != nil {
		return nil, err
	}
	running := trustOf(cluster, etcd)
	next, held := pairPlan(time.Now(), life, cluster, etcd, func() string { return settled(running) })
	if p.cluster, err = ensureCA(ctx, c, s, SecretCA, "kubernetes", life, next); err != nil {
		return nil, err
	}
	if p.etcd, err = ensureCA(ctx, c, s, SecretEtcdCA, "etcd-ca", life, next); err != nil {
		return nil, err
	}
	p.ca, p.etcdCA = p.cluster.ca, p.etcd.ca
	p.Trust, p.Held = trustOf(p.cluster, p.etcd), *held
	return p, nil
}

// ensureLeaf returns the certificate and key in Secret name (tls.crt, tls.key, and ca.crt: its
// CA's trust bundle), issuing them anew when they cannot be kept.
func ensureLeaf(ctx context.Context, c client.Client, s *Spec, name string, ca *rotatingCA, l certs.Leaf) (cert, key []byte, err error) {
	bundle := ca.bundle()
	err = ensureSecret(ctx, c, s, name, func(cur map[string][]byte) (map[string][]byte, error) {
		if cur != nil && ca.ca.Keep(cur["tls.crt"], cur["tls.key"], l) {
			cert, key = cur["tls.crt"], cur["tls.key"]
			if bytes.Equal(cur["ca.crt"], bundle) {
				return nil, nil
			}
			// The certificate stays; its CA file follows the trust bundle.
			return map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": bundle}, nil
		}
		var err error
		if cert, key, err = ca.ca.Issue(l); err != nil {
			return nil, err
		}
		return map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": bundle}, nil
	})
	return cert, key, err
}

// ensureSecret reads Secret name and calls update with its data (nil when it does not exist);
// update returns the data to write, or nil to keep the Secret as it is.
func ensureSecret(ctx context.Context, c client.Client, s *Spec, name string, update func(cur map[string][]byte) (map[string][]byte, error)) error {
	sec := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, sec)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading Secret %s/%s: %w", s.Namespace, name, err)
	}
	var cur map[string][]byte
	if exists {
		cur = sec.Data
		if cur == nil {
			cur = map[string][]byte{}
		}
	}
	data, err := update(cur)
	if err != nil || data == nil {
		return err
	}
	if !exists {
		sec = &corev1.Secret{ObjectMeta: s.meta(name, ""), Type: corev1.SecretTypeOpaque, Data: data}
		if err := c.Create(ctx, sec); err != nil {
			return fmt.Errorf("creating Secret %s/%s: %w", s.Namespace, name, err)
		}
		return nil
	}
	sec.Data = data
	if err := c.Update(ctx, sec); err != nil {
		return fmt.Errorf("updating Secret %s/%s: %w", s.Namespace, name, err)
	}
	return nil
}

// kubeconfigCert is the client certificate of a kubeconfig, or nil.
func kubeconfigCert(data []byte) []byte {
	cfg, err := clientcmd.Load(data)
	if err != nil || cfg.AuthInfos["user"] == nil {
		return nil
	}
	return cfg.AuthInfos["user"].ClientCertificateData
}

// kubeconfig is a kubeconfig for server with a client certificate.
func kubeconfig(server string, caPEM, certPEM, keyPEM []byte) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "user"}
	cfg.CurrentContext = "default"
	return clientcmd.Write(*cfg)
}

// keepKubeconfig reports whether data is a kubeconfig whose client certificate can be kept and
// that trusts bundle.
func keepKubeconfig(data []byte, ca *certs.CA, bundle []byte, l certs.Leaf) bool {
	cfg, err := clientcmd.Load(data)
	if err != nil || cfg.Clusters["cluster"] == nil || !bytes.Equal(cfg.Clusters["cluster"].CertificateAuthorityData, bundle) {
		return false
	}
	user := cfg.AuthInfos["user"]
	return user != nil && ca.Keep(user.ClientCertificateData, user.ClientKeyData, l)
}

// leafSecret is a leaf certificate of a control plane: its Secret, its CA, what it is, and
// whether the API server's pod mounts it (its checksum then rolls the pod).
type leafSecret struct {
	secret  string
	ca      *rotatingCA
	leaf    certs.Leaf
	mounted bool
}

// leavesOf are the leaf certificates of s, of p's CAs, the API server's serving one for
// servingHosts.
func leavesOf(s *Spec, p *pki, servingHosts []string) []leafSecret {
	etcdHosts := EtcdHosts(s.Namespace)
	if s.HighAvailability {
		etcdHosts = append(etcdHosts, EtcdMemberHosts(s.Namespace)...)
	}
	leaves := []leafSecret{
		{SecretServing, p.cluster, certs.Leaf{CommonName: "kube-apiserver", Hosts: servingHosts, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, true},
		// Client too: etcd's gRPC gateway (/v3/… over HTTPS, the maintenance Jobs' way in) dials
		// etcd's own client port presenting this certificate.
		{SecretEtcdServer, p.etcd, certs.Leaf{CommonName: "etcd", Hosts: etcdHosts, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}, false},
		{SecretEtcdClient, p.etcd, certs.Leaf{CommonName: etcdUser, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true},
		{SecretAdmin, p.cluster, certs.Leaf{CommonName: adminUser, Organization: []string{adminGroup}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, false},
	}
	if s.HighAvailability {
		// The members' certificates towards one another: serving, for every member's name, and
		// client, with no names (etcd checks a peer's names against its address). etcd reads them
		// at each handshake, like its serving certificate.
		leaves = append(leaves,
			leafSecret{SecretEtcdPeer, p.etcd, certs.Leaf{CommonName: etcdPeerCN, Hosts: EtcdMemberHosts(s.Namespace),
				Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, false},
			leafSecret{SecretEtcdPeerClient, p.etcd, certs.Leaf{CommonName: etcdPeerCN, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, false})
	}
	return leaves
}
