package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/yaml"
)

func TestParseRunOptions(t *testing.T) {
	// Out of a pod, whatever machine the tests run on.
	defer func(old string) { inClusterNamespaceFile = old }(inClusterNamespaceFile)
	inClusterNamespaceFile = filepath.Join(t.TempDir(), "namespace")

	tests := map[string]struct {
		args    []string
		want    func(t *testing.T, o *runOptions)
		wantErr []string // substrings of the error, each naming the flag; none means valid
	}{
		"defaults": {
			args: []string{"--provider-name", "local"},
			want: func(t *testing.T, o *runOptions) {
				assert.Equal(t, "local", o.ProviderName)
				assert.Equal(t, "default", o.Environment)
				assert.Equal(t, map[string]bool{controllerProviderConfig: true, controllerAccessRequest: true}, o.Enabled)
				assert.Equal(t, ":8080", o.MetricsBindAddress)
				assert.Equal(t, ":8081", o.HealthProbeBindAddress)
				assert.False(t, o.LeaderElect)
				assert.Empty(t, o.LeaderElectionNamespace)
				assert.Empty(t, o.ConfigPath)
				assert.Empty(t, o.Kubeconfig)
				assert.Equal(t, "198.18.0.0/16", o.LocalServiceCIDR, "a range platforms do not use")
				assert.Equal(t, []time.Duration{137 * time.Second, 107 * time.Second, 26 * time.Second},
					[]time.Duration{o.LeaseDuration, o.RenewDeadline, o.RetryPeriod})
				assert.Equal(t, 365*24*time.Hour, o.Certificates.Validity, "a year")
				assert.Equal(t, 30*24*time.Hour, o.Certificates.RenewBefore)
				assert.Equal(t, 10*365*24*time.Hour, o.Certificates.CAValidity, "ten years")
				assert.Equal(t, 365*24*time.Hour, o.Certificates.CARenewBefore, "rotated from a year before its end")
				assert.Equal(t, 2, o.HostedMaxRolling)
				assert.Equal(t, 10*time.Minute, o.HostedSecretRecheck)
			},
		},
		"certificates and rolling": {
			args: []string{"--provider-name=x", "--certificate-validity=10m", "--certificate-renew-before=9m", "--ca-validity=3m", "--ca-renew-before=2m",
				"--hosted-max-rolling=5", "--hosted-secret-recheck=1m"},
			want: func(t *testing.T, o *runOptions) {
				assert.Equal(t, 10*time.Minute, o.Certificates.Validity)
				assert.Equal(t, 9*time.Minute, o.Certificates.RenewBefore)
				assert.Equal(t, 3*time.Minute, o.Certificates.CAValidity)
				assert.Equal(t, 2*time.Minute, o.Certificates.CARenewBefore)
				assert.Equal(t, 5, o.HostedMaxRolling)
				assert.Equal(t, time.Minute, o.HostedSecretRecheck)
			},
		},
		"short lease": {
			args: []string{"--provider-name=x", "--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s"},
			want: func(t *testing.T, o *runOptions) {
				assert.Equal(t, []time.Duration{15 * time.Second, 10 * time.Second, 2 * time.Second},
					[]time.Duration{o.LeaseDuration, o.RenewDeadline, o.RetryPeriod})
			},
		},
		"every flag": {
			args: []string{
				"--provider-name=kind", "--environment=prod", "--controllers", " providerconfig ",
				"--config=/etc/cp.yaml", "--kubeconfig=/tmp/kc", "--leader-elect",
				"--leader-election-namespace=openmcp-system", "--metrics-bind-address=0",
				"--health-probe-bind-address=127.0.0.1:9440", "--zap-log-level=debug",
			},
			want: func(t *testing.T, o *runOptions) {
				assert.Equal(t, "kind", o.ProviderName)
				assert.Equal(t, "prod", o.Environment)
				assert.Equal(t, map[string]bool{controllerProviderConfig: true}, o.Enabled)
				assert.Equal(t, "/etc/cp.yaml", o.ConfigPath)
				assert.Equal(t, "/tmp/kc", o.Kubeconfig)
				assert.True(t, o.LeaderElect)
				assert.Equal(t, "openmcp-system", o.LeaderElectionNamespace)
				assert.Equal(t, "0", o.MetricsBindAddress)
				assert.Equal(t, "127.0.0.1:9440", o.HealthProbeBindAddress)
				assert.NotNil(t, o.Zap.Level, "--zap-log-level is bound")
			},
		},
		"single dash flags": {
			args: []string{"-provider-name", "local", "-controllers=accessrequest"},
			want: func(t *testing.T, o *runOptions) {
				assert.Equal(t, map[string]bool{controllerAccessRequest: true}, o.Enabled)
			},
		},
		"provider name missing":        {args: nil, wantErr: []string{"--provider-name is required"}},
		"provider name not a label":    {args: []string{"--provider-name", "Local_1"}, wantErr: []string{`--provider-name "Local_1"`, "RFC 1123 label"}},
		"provider name with a dot":     {args: []string{"--provider-name", "a.b"}, wantErr: []string{`--provider-name "a.b"`}},
		"provider name too long":       {args: []string{"--provider-name", "a234567890123456789012345678901234567890123456789012345678901234"}, wantErr: []string{"--provider-name", "no more than 63"}},
		"environment not a label":      {args: []string{"--provider-name=x", "--environment=Prod"}, wantErr: []string{`--environment "Prod"`}},
		"environment empty":            {args: []string{"--provider-name=x", "--environment="}, wantErr: []string{`--environment ""`}},
		"unknown controller":           {args: []string{"--provider-name=x", "--controllers=providerconfig,cluster"}, wantErr: []string{`--controllers: unknown controller "cluster"`, "valid are accessrequest, providerconfig, scheduler"}},
		"no controller":                {args: []string{"--provider-name=x", "--controllers=,"}, wantErr: []string{"--controllers: name at least one controller", "valid are accessrequest, providerconfig, scheduler"}},
		"leader election out of a pod": {args: []string{"--provider-name=x", "--leader-elect"}, wantErr: []string{"--leader-elect needs --leader-election-namespace"}},
		"bad lease namespace":          {args: []string{"--provider-name=x", "--leader-election-namespace=Kube_System"}, wantErr: []string{`--leader-election-namespace "Kube_System"`}},
		"lease not longer than renew":  {args: []string{"--provider-name=x", "--leader-elect-lease-duration=107s"}, wantErr: []string{"--leader-elect-lease-duration 1m47s: must be longer than --leader-elect-renew-deadline (1m47s)"}},
		"renew too close to retry":     {args: []string{"--provider-name=x", "--leader-elect-renew-deadline=30s"}, wantErr: []string{"--leader-elect-renew-deadline 30s: must be longer than 1.2 × --leader-elect-retry-period (26s)"}},
		"retry not positive":           {args: []string{"--provider-name=x", "--leader-elect-retry-period=0s"}, wantErr: []string{"--leader-elect-retry-period 0s: must be positive"}},
		"metrics address no port":      {args: []string{"--provider-name=x", "--metrics-bind-address=localhost"}, wantErr: []string{`--metrics-bind-address "localhost"`, "missing port"}},
		"probe address bad port":       {args: []string{"--provider-name=x", "--health-probe-bind-address=:http"}, wantErr: []string{`--health-probe-bind-address ":http"`, "not a number"}},
		"probe address empty":          {args: []string{"--provider-name=x", "--health-probe-bind-address="}, wantErr: []string{`--health-probe-bind-address ""`}},
		"unknown flag":                 {args: []string{"--provider-name=x", "--provider=y"}, wantErr: []string{"flag provided but not defined: -provider"}},
		"bad bool":                     {args: []string{"--provider-name=x", "--leader-elect=maybe"}, wantErr: []string{"-leader-elect"}},
		"bad zap level":                {args: []string{"--provider-name=x", "--zap-log-level=loud"}, wantErr: []string{"-zap-log-level"}},
		"positional argument":          {args: []string{"--provider-name=x", "extra"}, wantErr: []string{`unexpected argument "extra"`}},
		"service range not a CIDR":     {args: []string{"--provider-name=x", "--local-service-cidr=10.96.0.1"}, wantErr: []string{`--local-service-cidr "10.96.0.1" is not a CIDR`}},
		"service range too large":      {args: []string{"--provider-name=x", "--local-service-cidr=10.0.0.0/8"}, wantErr: []string{`--local-service-cidr "10.0.0.0/8": the prefix must be from /12 to /29`}},
		"renewal not before the end": {args: []string{"--provider-name=x", "--certificate-validity=1h", "--certificate-renew-before=2h"},
			wantErr: []string{"--certificate-renew-before 2h0m0s must be positive and less than --certificate-validity 1h0m0s"}},
		"CA rotated too early": {args: []string{"--provider-name=x", "--ca-validity=3m", "--ca-renew-before=2m1s"},
			wantErr: []string{"--ca-renew-before 2m1s: must be positive and at most two thirds of --ca-validity 3m0s"}},
		"rolling not positive": {args: []string{"--provider-name=x", "--hosted-max-rolling=0"}, wantErr: []string{"--hosted-max-rolling 0: must be at least 1"}},
		"every problem is reported": {
			args:    []string{"--provider-name=X", "--environment=Y", "--controllers=z"},
			wantErr: []string{"--provider-name", "--environment", "--controllers"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			o, err := parseRunOptions(tt.args)
			if len(tt.wantErr) > 0 {
				require.Error(t, err)
				for _, want := range tt.wantErr {
					assert.Contains(t, err.Error(), want)
				}
				return
			}
			require.NoError(t, err)
			tt.want(t, o)
		})
	}
}

func TestParseRunOptionsHelp(t *testing.T) {
	_, err := parseRunOptions([]string{"-h"})
	assert.True(t, errors.Is(err, flag.ErrHelp), "got %v", err)
}

func TestParseInitOptions(t *testing.T) {
	tests := map[string]struct {
		args        []string
		wantTimeout time.Duration
		wantErr     string
	}{
		"defaults":         {wantTimeout: time.Minute},
		"timeout":          {args: []string{"--timeout=5s", "--kubeconfig=/kc"}, wantTimeout: 5 * time.Second},
		"zero timeout":     {args: []string{"--timeout=0s"}, wantErr: "--timeout 0s: must be positive"},
		"bad timeout":      {args: []string{"--timeout=soon"}, wantErr: "-timeout"},
		"run-only flag":    {args: []string{"--controllers=scheduler"}, wantErr: "flag provided but not defined: -controllers"},
		"contract flags":   {args: []string{"--environment=prod", "--verbosity=debug", "--provider-name=local"}, wantTimeout: time.Minute},
		"bad provider":     {args: []string{"--provider-name=Local"}, wantErr: `--provider-name "Local"`},
		"bad verbosity":    {args: []string{"--verbosity=loud"}, wantErr: `--verbosity "loud"`},
		"positional":       {args: []string{"crds"}, wantErr: `unexpected argument "crds"`},
		"kubeconfig alone": {args: []string{"--kubeconfig", "/kc"}, wantTimeout: time.Minute},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			o, err := parseInitOptions(tt.args)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantTimeout, o.Timeout)
		})
	}
}

// openMCPArgs builds the container args openMCP's operator gives a ClusterProvider image
// (internal/controllers/provider/install, deployment.go and job.go): the command items (initCommand
// or runCommand, default "init"/"run"), then --environment, --verbosity and --provider-name; for
// the Deployment also --leader-elect=true when runReplicas > 1, and the metrics flags unless
// metrics are disabled (metricsPort 0 here).
func openMCPArgs(command []string, deployment bool, env, verbosity, name string, replicas, metricsPort int) []string {
	args := append([]string{}, command...)
	args = append(args, "--environment="+env, "--verbosity="+verbosity, "--provider-name="+name)
	if deployment && replicas > 1 {
		args = append(args, "--leader-elect=true")
	}
	if deployment && metricsPort > 0 {
		args = append(args, fmt.Sprintf("--metrics-bind-address=:%d", metricsPort), "--metrics-secure=false")
	}
	return args
}

// TestOpenMCPArgs feeds both parsers the exact argument lists openMCP's operator builds: every
// verbosity spelling, one and several replicas, metrics on and off, default commands and the
// documented openMCP-mode runCommand (deploy/openmcp).
func TestOpenMCPArgs(t *testing.T) {
	defer func(old string) { inClusterNamespaceFile = old }(inClusterNamespaceFile)
	inClusterNamespaceFile = filepath.Join(t.TempDir(), "namespace") // in a pod: --leader-elect needs no namespace flag
	require.NoError(t, os.WriteFile(inClusterNamespaceFile, []byte("openmcp-system"), 0o600))

	// The documented openMCP modes: deploy/openmcp's ClusterProviders, local and hosted.
	runCommandOf := func(file string) []string {
		var cp struct {
			Spec struct {
				RunCommand []string `json:"runCommand"`
			} `json:"spec"`
		}
		data, err := os.ReadFile("../../deploy/openmcp/" + file)
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(data, &cp))
		require.NotEmpty(t, cp.Spec.RunCommand, file)
		return cp.Spec.RunCommand
	}
	localMode, hostedMode := runCommandOf("clusterprovider.yaml"), runCommandOf("clusterprovider-hosted.yaml")
	levels := map[string]zapcore.Level{
		"DEBUG": zapcore.DebugLevel, "debug": zapcore.DebugLevel, "Debug": zapcore.DebugLevel,
		"INFO": zapcore.InfoLevel, "info": zapcore.InfoLevel, "": zapcore.InfoLevel,
		"ERROR": zapcore.ErrorLevel, "error": zapcore.ErrorLevel, "Error": zapcore.ErrorLevel,
	}
	for verbosity, level := range levels {
		for _, replicas := range []int{1, 2} {
			for _, metricsPort := range []int{0, 8080} {
				for _, runCommand := range [][]string{nil, localMode, hostedMode} {
					name := fmt.Sprintf("verbosity %q replicas %d metrics %d run command %q", verbosity, replicas, metricsPort, runCommand)
					t.Run(name, func(t *testing.T) {
						cmd := runCommand
						if cmd == nil {
							cmd = []string{"run"}
						}
						args := openMCPArgs(cmd, true, "prod", verbosity, "local", replicas, metricsPort)
						for i := range args { // the kubelet expands $(VAR) from the container's env
							args[i] = strings.ReplaceAll(args[i], "$(POD_IP)", "10.244.1.3")
						}
						require.Equal(t, "run", args[0])
						o, err := parseRunOptions(args[1:])
						require.NoError(t, err, "args %q", args)
						assert.Equal(t, "prod", o.Environment)
						assert.Equal(t, "local", o.ProviderName)
						assert.Equal(t, level, o.Zap.Level, "--verbosity %q", verbosity)
						assert.Equal(t, replicas > 1 || runCommand != nil, o.LeaderElect)
						if runCommand != nil {
							assert.Equal(t, map[string]bool{controllerProviderConfig: true}, o.Enabled, "openMCP's labeller and scheduler run instead of ours")
						}
						switch {
						case slices.Equal(runCommand, localMode):
							assert.Equal(t, []string{"/opt/cluster-provider/k8s"}, o.LocalBinaryDirs)
							assert.Equal(t, "10.244.1.3", o.LocalAdvertiseHost)
							assert.False(t, o.HostedBackend)
						case slices.Equal(runCommand, hostedMode):
							assert.True(t, o.HostedBackend)
							assert.Empty(t, o.LocalBinaryDirs, "the hosted deployment has no state volume: the local backend is off")
						}
						if metricsPort > 0 {
							assert.Equal(t, ":8080", o.MetricsBindAddress)
						}
						assert.False(t, o.MetricsSecure)

						initArgs := openMCPArgs([]string{"init"}, false, "prod", verbosity, "local", replicas, metricsPort)
						io, err := parseInitOptions(initArgs[1:])
						require.NoError(t, err, "args %q", initArgs)
						assert.Equal(t, contract{ProviderName: "local", Environment: "prod", Verbosity: verbosity}, io.contract)
					})
				}
			}
		}
	}
}

func TestVerbosity(t *testing.T) {
	tests := map[string]struct {
		args    []string
		want    zapcore.LevelEnabler
		wantErr string
	}{
		"default is INFO":              {args: nil, want: zapcore.InfoLevel},
		"DEBUG":                        {args: []string{"--verbosity=DEBUG"}, want: zapcore.DebugLevel},
		"explicit zap level wins":      {args: []string{"--verbosity=ERROR", "--zap-log-level=debug"}},
		"zap level before verbosity":   {args: []string{"--zap-log-level=debug", "--verbosity=ERROR"}},
		"unknown verbosity":            {args: []string{"--verbosity=TRACE"}, wantErr: `--verbosity "TRACE": want DEBUG, INFO or ERROR (any case)`},
		"metrics-secure":               {args: []string{"--metrics-secure"}, want: zapcore.InfoLevel},
		"metrics-secure needs a bool":  {args: []string{"--metrics-secure=yes"}, wantErr: "-metrics-secure"},
		"unknown flag still refused":   {args: []string{"--verbose"}, wantErr: "flag provided but not defined: -verbose"},
		"verbosity with a space value": {args: []string{"--verbosity", "info"}, want: zapcore.InfoLevel},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			o, err := parseRunOptions(append([]string{"--provider-name=x"}, tt.args...))
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			if tt.want == nil { // --zap-log-level=debug was given: zap's own level, debug enabled
				require.NotNil(t, o.Zap.Level)
				assert.True(t, o.Zap.Level.Enabled(zapcore.DebugLevel))
				return
			}
			assert.Equal(t, tt.want, o.Zap.Level)
		})
	}
	o, err := parseRunOptions([]string{"--provider-name=x", "--metrics-secure"})
	require.NoError(t, err)
	assert.True(t, o.MetricsSecure)
	assert.True(t, metricsOptions(o).SecureServing)
	assert.NotNil(t, metricsOptions(o).FilterProvider, "authentication and authorization")
	o, err = parseRunOptions([]string{"--provider-name=x"})
	require.NoError(t, err)
	assert.False(t, metricsOptions(o).SecureServing)
	assert.Nil(t, metricsOptions(o).FilterProvider)
}

// TestOwnPod: in a pod the operator names its own pod (its ServiceAccount's namespace, its host
// name) for the hosted backend; out of a pod, none.
func TestOwnPod(t *testing.T) {
	defer func(old string) { inClusterNamespaceFile = old }(inClusterNamespaceFile)
	inClusterNamespaceFile = filepath.Join(t.TempDir(), "namespace")
	self, err := ownPod()
	require.NoError(t, err)
	assert.Empty(t, self, "out of a pod")

	require.NoError(t, os.WriteFile(inClusterNamespaceFile, []byte("cluster-provider-system\n"), 0o600))
	self, err = ownPod()
	require.NoError(t, err)
	host, err := os.Hostname()
	require.NoError(t, err)
	assert.Equal(t, "cluster-provider-system", self.Namespace)
	assert.Equal(t, host, self.Name)
}
