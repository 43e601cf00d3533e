package local

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"

	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// completeWithin bounds what the controller manager does by itself (a namespace's deletion, the
// garbage collector's first discovery): seconds when idle, more on a busy machine.
const completeWithin = 60 * time.Second

// checkComplete checks, as the cluster's admin, what only a controller manager does: the
// aggregated roles, a new namespace's ServiceAccount and CA bundle, namespace deletion, garbage
// collection and CSR signing with the cluster CA (caPEM).
func checkComplete(t *testing.T, cs kubernetes.Interface, caPEM []byte) {
	ctx := t.Context()
	t.Run("aggregated roles", func(t *testing.T) {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, name := range []string{"view", "edit", "admin"} {
				role, err := cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
				if assert.NoError(c, err) {
					assert.NotEmpty(c, role.Rules, "ClusterRole %s is aggregated", name)
				}
			}
		}, completeWithin, 100*time.Millisecond)
	})

	t.Run("a new namespace", func(t *testing.T) {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := cs.CoreV1().ServiceAccounts("fresh").Get(ctx, "default", metav1.GetOptions{})
			assert.NoError(c, err, "ServiceAccount default")
			cm, err := cs.CoreV1().ConfigMaps("fresh").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			if assert.NoError(c, err, "ConfigMap kube-root-ca.crt") {
				assert.Equal(c, string(caPEM), cm.Data["ca.crt"], "the cluster CA")
			}
		}, completeWithin, 100*time.Millisecond)
	})

	t.Run("namespace deletion completes", func(t *testing.T) {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tmp"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = cs.CoreV1().ConfigMaps("tmp").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "content"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, cs.CoreV1().Namespaces().Delete(ctx, "tmp", metav1.DeleteOptions{}))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := cs.CoreV1().Namespaces().Get(ctx, "tmp", metav1.GetOptions{})
			assert.True(c, apierrors.IsNotFound(err), "namespace tmp is gone (err %v)", err)
		}, completeWithin, 100*time.Millisecond)
	})

	t.Run("an orphaned dependent is collected", func(t *testing.T) { checkOrphanedDependentCollected(t, ctx, cs) })
	t.Run("an approved CSR is signed by the cluster CA", func(t *testing.T) { checkCSRSigned(t, ctx, cs, caPEM) })
}

// checkOrphanedDependentCollected checks that the garbage collector orphans the dependent of an
// owner deleted with the orphan policy, and collects the dependent of one deleted in the background.
func checkOrphanedDependentCollected(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	cms := cs.CoreV1().ConfigMaps("default")
	// ownedPair creates ConfigMap owner and ConfigMap dependent, owned by it.
	ownedPair := func(owner, dependent string) {
		o, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: owner}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: dependent, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: o.Name, UID: o.UID,
		}}}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// Deleted with the orphan policy, the owner leaves its dependent, which the garbage
	// collector orphans.
	ownedPair("owner", "dependent")
	orphaning := metav1.DeletePropagationOrphan
	require.NoError(t, cms.Delete(ctx, "owner", metav1.DeleteOptions{PropagationPolicy: &orphaning}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d, err := cms.Get(ctx, "dependent", metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.Empty(c, d.OwnerReferences, "the garbage collector orphaned the dependent")
		}
	}, completeWithin, 100*time.Millisecond)

	// Deleted in the background (the default), the owner leaves collecting its dependent to
	// the garbage collector.
	ownedPair("owner2", "dependent2")
	require.NoError(t, cms.Delete(ctx, "owner2", metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := cms.Get(ctx, "dependent2", metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "the dependent of a deleted owner is collected (err %v)", err)
	}, completeWithin, 100*time.Millisecond)
}

// checkCSRSigned checks that an approved CertificateSigningRequest is signed by the cluster CA
// (caPEM).
func checkCSRSigned(t *testing.T, ctx context.Context, cs kubernetes.Interface, caPEM []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "jane", Organization: []string{"devs"}}}, key)
	require.NoError(t, err)
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "jane"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	csr, err = cs.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	require.NoError(t, err)
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test", Message: "approved by the test",
	})
	_, err = cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	require.NoError(t, err)
	var issued []byte
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if assert.NoError(c, err) {
			issued = got.Status.Certificate
			assert.NotEmpty(c, issued, "the signer wrote the certificate")
		}
	}, completeWithin, 100*time.Millisecond)
	certs, err := certutil.ParseCertsPEM(issued)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	_, err = certs[0].Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err, "the certificate chains to the cluster CA")
	assert.Equal(t, "jane", certs[0].Subject.CommonName)
}

// checkEtcdPrivate checks that the etcd with pid listens on no TCP port, only on unix sockets in
// the cluster's 0700 folder dir, and, when the test runs as root, that another user cannot connect.
func checkEtcdPrivate(t *testing.T, dir string, pid int) {
	require.NotZero(t, pid)
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the cluster's folder")
	for _, sock := range []string{etcdSocket, etcdPeerSocket} {
		fi, err := os.Stat(filepath.Join(dir, sock))
		if assert.NoError(t, err) {
			assert.Equal(t, os.ModeSocket, fi.Mode().Type(), "%s is a unix socket", sock)
		}
	}
	assert.Empty(t, tcpListeners(t, pid), "etcd listens on no TCP port")

	if os.Geteuid() != 0 {
		t.Log("not root: the check that another user cannot connect needs to run a process as one")
		return
	}
	// The test binary dials as another user: a copy of it where that user may run it.
	binDir, err := os.MkdirTemp("", "dial")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(binDir) })
	require.NoError(t, os.Chmod(binDir, 0o755))
	self, err := os.ReadFile("/proc/self/exe")
	require.NoError(t, err)
	bin := filepath.Join(binDir, "dial")
	require.NoError(t, os.WriteFile(bin, self, 0o755))
	dial := func(uid uint32) (string, error) {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), dialEnv+"="+filepath.Join(dir, etcdSocket))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := dial(0)
	require.NoError(t, err, "the operator's user connects: %s", out)
	assert.Contains(t, out, "connected")
	out, err = dial(65534)
	require.Error(t, err, "user nobody must not connect: %s", out)
	assert.Contains(t, out, "permission denied")
}

// dialEnv makes the test binary connect to the unix socket it names, print the outcome and exit.
const dialEnv = "LOCAL_TEST_DIAL_UNIX"

func TestMain(m *testing.M) {
	if path := os.Getenv(dialEnv); path != "" {
		c, err := net.Dial("unix", path)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		_ = c.Close()
		fmt.Println("connected")
		os.Exit(0)
	}
	code := m.Run()
	testenv.StopS3() // started by the first test that needs it (objectstore_test.go)
	os.Exit(code)
}

// tcpListeners lists the TCP sockets in LISTEN state that process pid holds, as "local address"
// entries of /proc/net/tcp{,6}.
func tcpListeners(t *testing.T, pid int) []string {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	require.NoError(t, err)
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	require.NotEmpty(t, inodes, "etcd holds sockets")
	var out []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) > 9 && fields[3] == "0A" && inodes[fields[9]] {
				out = append(out, fields[1])
			}
		}
		_ = f.Close()
	}
	return out
}
