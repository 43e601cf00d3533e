package local

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/openmcp-local/cluster-provider/test/testenv"
)

func TestParseKubernetesVersion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		out     string
		want    string
		wantErr bool
	}{
		{name: "release", out: "Kubernetes v1.37.1", want: "1.37.1"},
		{name: "pre-release", out: "Kubernetes v1.36.0-alpha.1", want: "1.36.0-alpha.1"},
		{name: "trailing newline", out: "Kubernetes v1.30.2\n", want: "1.30.2"},
		{name: "surrounding blanks", out: "  \n Kubernetes v1.30.2 \r\n", want: "1.30.2"},
		{name: "extra lines", out: "Kubernetes v1.31.0\nsome warning\nKubernetes v9.9.9\n", want: "1.31.0"},
		{name: "junk", out: "command not found", wantErr: true},
		{name: "no prefix", out: "v1.37.1", wantErr: true},
		{name: "no v", out: "Kubernetes 1.37.1", wantErr: true},
		{name: "not semantic", out: "Kubernetes v1.37", wantErr: true},
		{name: "version on a later line", out: "warning: something\nKubernetes v1.30.2\n", wantErr: true},
		{name: "empty", out: "", wantErr: true},
		{name: "blank", out: " \n ", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseKubernetesVersion(tc.out)
			if tc.wantErr {
				require.Error(t, err, "parsed %q", got)
				assert.Empty(t, got)
				assert.Contains(t, err.Error(), "Kubernetes vX.Y.Z")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// fakeBinary writes an executable shell script named name into dir.
func fakeBinary(t *testing.T, dir, name, script string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, name)
	// Never write through a symlink (fakeFolder links the real etcd).
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		require.NoError(t, err)
	}
	require.NoError(t, os.WriteFile(path, []byte(script), mode))
	require.NoError(t, os.Chmod(path, mode)) // the umask must not take the x bits away
}

func echoVersion(v string) string { return "#!/bin/sh\necho \"Kubernetes v" + v + "\"\n" }

// fakeFolder is a binaries folder whose kube-apiserver and kube-controller-manager report version;
// its etcd is the envtest one (LoadBinaries starts it once).
func fakeFolder(t *testing.T, dir, version string) {
	t.Helper()
	fakeBinary(t, dir, "kube-apiserver", echoVersion(version), 0o755)
	fakeBinary(t, dir, "kube-controller-manager", echoVersion(version), 0o755)
	assets, err := testenv.AssetsDir()
	require.NoError(t, err)
	require.NoError(t, os.Symlink(filepath.Join(assets, "etcd"), filepath.Join(dir, "etcd")))
}

// loadBinariesCase is a case of TestLoadBinaries.
type loadBinariesCase struct {
	name string
	// setup makes the folders under root and returns the folders to load.
	setup     func(t *testing.T, root string) []string
	want      []string // versions
	errSubstr []string // besides every folder
}

// loadBinariesGoodCases are the cases of TestLoadBinaries that load.
func loadBinariesGoodCases() []loadBinariesCase {
	return []loadBinariesCase{
		{
			name: "good folder",
			setup: func(t *testing.T, root string) []string {
				d := filepath.Join(root, "a")
				fakeFolder(t, d, "1.30.2")
				return []string{d}
			},
			want: []string{"1.30.2"},
		},
		{
			name: "two versions keep their order",
			setup: func(t *testing.T, root string) []string {
				a, b := filepath.Join(root, "new"), filepath.Join(root, "old")
				fakeFolder(t, a, "1.31.0")
				fakeFolder(t, b, "1.30.2")
				return []string{a, b}
			},
			want: []string{"1.31.0", "1.30.2"},
		},
		{
			name: "folder name means nothing",
			setup: func(t *testing.T, root string) []string {
				d := filepath.Join(root, "1.29.0-linux-amd64")
				fakeFolder(t, d, "1.36.0-alpha.1")
				return []string{d}
			},
			want: []string{"1.36.0-alpha.1"},
		},
		{
			name:  "no folders",
			setup: func(*testing.T, string) []string { return nil },
			want:  nil,
		},
	}
}

// loadBinariesMissingCases are the cases of TestLoadBinaries where a folder or a binary is missing.
func loadBinariesMissingCases() []loadBinariesCase {
	return []loadBinariesCase{
		{
			name: "missing folder",
			setup: func(t *testing.T, root string) []string {
				return []string{filepath.Join(root, "missing")}
			},
			errSubstr: []string{"kube-apiserver", "no such file"},
		},
		{
			name: "folder without etcd",
			setup: func(t *testing.T, root string) []string {
				d := filepath.Join(root, "a")
				fakeFolder(t, d, "1.30.2")
				require.NoError(t, os.Remove(filepath.Join(d, "etcd")))
				return []string{d}
			},
			errSubstr: []string{filepath.Join("a", "etcd"), "no such file"},
		},
		{
			name: "folder without kube-apiserver",
			setup: func(t *testing.T, root string) []string {
				d := filepath.Join(root, "a")
				fakeBinary(t, d, "etcd", "#!/bin/sh\necho etcd\n", 0o755)
				return []string{d}
			},
			errSubstr: []string{filepath.Join("a", "kube-apiserver"), "no such file"},
		},
		{
			name: "folder without kube-controller-manager",
			setup: func(t *testing.T, root string) []string {
				d := filepath.Join(root, "a")
				fakeFolder(t, d, "1.30.2")
				require.NoError(t, os.Remove(filepath.Join(d, "kube-controller-manager")))
				return []string{d}
			},
			errSubstr: []string{filepath.Join("a", "kube-controller-manager"), "no such file", "make envtest"},
		},
	}
}

// loadBinariesBadBinaryCases are the cases of TestLoadBinaries where a binary is there but is not
// fit: another version, not executable, failing or printing junk.
func loadBinariesBadBinaryCases() []loadBinariesCase {
	return []loadBinariesCase{
		{
			name: "kube-controller-manager of another version",
			setup: func(t *testing.T, root string) []string {
				d := filepath.Join(root, "a")
				fakeFolder(t, d, "1.30.2")
				fakeBinary(t, d, "kube-controller-manager", echoVersion("1.31.0"), 0o755)
				return []string{d}
			},
			errSubstr: []string{filepath.Join("a", "kube-controller-manager"), "Kubernetes v1.31.0", "kube-apiserver is v1.30.2", "same version"},
		},
		{
			name: "kube-controller-manager exits 1",
			setup: func(t *testing.T, root string) []string {
				d := filepath.Join(root, "a")
				fakeFolder(t, d, "1.30.2")
				fakeBinary(t, d, "kube-controller-manager", "#!/bin/sh\necho 'bad build' >&2\nexit 1\n", 0o755)
				return []string{d}
			},
			errSubstr: []string{"kube-controller-manager --version", "exit status 1", "bad build"},
		},
		{
			name: "kube-apiserver not executable",
			setup: func(t *testing.T, root string) []string {
				d := filepath.Join(root, "a")
				fakeFolder(t, d, "1.30.2")
				require.NoError(t, os.Chmod(filepath.Join(d, "kube-apiserver"), 0o644))
				return []string{d}
			},
			errSubstr: []string{"kube-apiserver is not an executable file"},
		},
		{
			name: "kube-apiserver is a folder",
			setup: func(t *testing.T, root string) []string {
				d := filepath.Join(root, "a")
				fakeBinary(t, d, "etcd", "#!/bin/sh\necho etcd\n", 0o755)
				require.NoError(t, os.Mkdir(filepath.Join(d, "kube-apiserver"), 0o755))
				return []string{d}
			},
			errSubstr: []string{"kube-apiserver is not an executable file"},
		},
		{
			name: "kube-apiserver prints junk",
			setup: func(t *testing.T, root string) []string {
				d := filepath.Join(root, "a")
				fakeFolder(t, d, "1.30.2")
				fakeBinary(t, d, "kube-apiserver", "#!/bin/sh\necho 'hello world'\n", 0o755)
				return []string{d}
			},
			errSubstr: []string{`kube-apiserver --version printed "hello world"`, "Kubernetes vX.Y.Z"},
		},
		{
			name: "kube-apiserver exits 1",
			setup: func(t *testing.T, root string) []string {
				d := filepath.Join(root, "a")
				fakeFolder(t, d, "1.30.2")
				fakeBinary(t, d, "kube-apiserver", "#!/bin/sh\necho 'cannot run here' >&2\nexit 1\n", 0o755)
				return []string{d}
			},
			errSubstr: []string{"kube-apiserver --version", "exit status 1", "cannot run here"},
		},
		{
			name: "etcd exits 1",
			setup: func(t *testing.T, root string) []string {
				d := filepath.Join(root, "a")
				fakeFolder(t, d, "1.30.2")
				fakeBinary(t, d, "etcd", "#!/bin/sh\necho 'wrong architecture'\nexit 1\n", 0o755)
				return []string{d}
			},
			errSubstr: []string{"etcd --version", "exit status 1", "wrong architecture"},
		},
	}
}

// loadBinariesBadSetCases are the cases of TestLoadBinaries where the folders do not go together.
func loadBinariesBadSetCases() []loadBinariesCase {
	return []loadBinariesCase{
		{
			name: "second folder bad",
			setup: func(t *testing.T, root string) []string {
				good, bad := filepath.Join(root, "good"), filepath.Join(root, "bad")
				fakeFolder(t, good, "1.30.2")
				fakeFolder(t, bad, "1.31.0")
				require.NoError(t, os.Remove(filepath.Join(bad, "etcd")))
				return []string{good, bad}
			},
			errSubstr: []string{filepath.Join("bad", "etcd")},
		},
		{
			name: "two folders of one version",
			setup: func(t *testing.T, root string) []string {
				a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
				fakeFolder(t, a, "1.30.2")
				fakeFolder(t, b, "1.30.2")
				return []string{a, b}
			},
			errSubstr: []string{"both serve Kubernetes 1.30.2"},
		},
	}
}

func TestLoadBinaries(t *testing.T) {
	for _, tc := range slices.Concat(loadBinariesGoodCases(), loadBinariesMissingCases(), loadBinariesBadBinaryCases(), loadBinariesBadSetCases()) {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dirs := tc.setup(t, root)
			got, err := LoadBinaries(t.Context(), dirs)
			if tc.errSubstr != nil {
				require.Error(t, err, "loaded %+v", got)
				assert.Nil(t, got)
				msg := err.Error()
				if tc.name == "second folder bad" {
					// Only the bad folder is named.
					assert.Contains(t, msg, dirs[1])
					assert.NotContains(t, msg, dirs[0])
				} else {
					for _, d := range dirs {
						assert.Contains(t, msg, d, "the error names the folder")
					}
				}
				for _, s := range tc.errSubstr {
					assert.Contains(t, msg, s)
				}
				return
			}
			require.NoError(t, err)
			require.Len(t, got, len(tc.want))
			for i, b := range got {
				assert.Equal(t, tc.want[i], b.Version)
				assert.True(t, filepath.IsAbs(b.Dir), "Dir %s is absolute", b.Dir)
				assert.Equal(t, dirs[i], b.Dir)
				assert.Equal(t, filepath.Join(dirs[i], "kube-apiserver"), b.APIServer())
				assert.Equal(t, filepath.Join(dirs[i], "kube-controller-manager"), b.ControllerManager())
				assert.Equal(t, filepath.Join(dirs[i], "etcd"), b.Etcd())
			}
		})
	}
}

func TestLoadBinariesRelativeFolder(t *testing.T) {
	root := t.TempDir()
	fakeFolder(t, filepath.Join(root, "bins"), "1.30.2")
	t.Chdir(root)

	got, err := LoadBinaries(t.Context(), []string{"bins"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, filepath.Join(root, "bins"), got[0].Dir, "Dir is made absolute")
	assert.Equal(t, "1.30.2", got[0].Version)

	// An error names the folder as it was given.
	require.NoError(t, os.Remove(filepath.Join(root, "bins", "etcd")))
	_, err = LoadBinaries(t.Context(), []string{"bins"})
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "--local-binaries folder bins: "), err.Error())
}

func TestParseEtcdVersion(t *testing.T) {
	for out, want := range map[string]string{
		"etcd Version: 3.6.6\nGit SHA: v3.6.6\nGo Version: go1.26.8\n": "3.6.6",
		"etcd Version: 3.7.0\n":  "3.7.0",
		"etcd\n":                 "",
		"etcd Version: banana\n": "",
	} {
		assert.Equal(t, want, parseEtcdVersion(out), out)
	}
	assert.Equal(t, 6, Binaries{Version: "1.36.3", EtcdVersion: "3.6.6"}.EtcdLine())
	assert.Equal(t, 7, Binaries{Version: "1.37.1"}.EtcdLine(), "no etcd version: the line of the Kubernetes version")
	assert.Equal(t, 5, Binaries{Version: "1.37.1", EtcdVersion: "3.5.35"}.EtcdLine(), "what etcd reports wins")
}
