package kind

import (
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"

	"github.com/openmcp-local/cluster-provider/backend/authconfig"
)

// authMountPath is where the control-plane node sees the cluster's authentication folder. The
// folder is mounted, not the file: the file is replaced by a rename, which a file mount would
// not show.
const authMountPath = "/etc/cluster-provider/authn"

// clusterConfig is the kind configuration of a Cluster: one control-plane node that mounts
// authDir and a kube-apiserver that reads its authentication configuration from there.
// kubeadm's v1beta4 (Kubernetes 1.31 and later) takes extraArgs as a list, v1beta3 as a map: a
// patch for each, kind applies the one matching its kubeadm config.
func clusterConfig(authDir string) *v1alpha4.Cluster {
	file := authMountPath + "/" + authconfig.FileName
	cfg := &v1alpha4.Cluster{
		TypeMeta: v1alpha4.TypeMeta{APIVersion: "kind.x-k8s.io/v1alpha4", Kind: "Cluster"},
		Nodes: []v1alpha4.Node{{
			Role:        v1alpha4.ControlPlaneRole,
			ExtraMounts: []v1alpha4.Mount{{HostPath: authDir, ContainerPath: authMountPath, Readonly: true}},
		}},
		KubeadmConfigPatches: []string{
			`apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
apiServer:
  extraArgs:
  - name: authentication-config
    value: ` + file + `
  extraVolumes:
  - name: cluster-provider-authn
    hostPath: ` + authMountPath + `
    mountPath: ` + authMountPath + `
    readOnly: true
    pathType: Directory
`,
			`apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
apiServer:
  extraArgs:
    authentication-config: ` + file + `
  extraVolumes:
  - name: cluster-provider-authn
    hostPath: ` + authMountPath + `
    mountPath: ` + authMountPath + `
    readOnly: true
    pathType: Directory
`,
		},
	}
	return cfg
}
