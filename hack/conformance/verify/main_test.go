package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// report writes a JUnit report shaped as ginkgo v2 writes it for the e2e framework (statuses as
// attributes, a <skipped> or <failure> child, suite nodes without text).
func report(cases ...string) string {
	return `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="9" disabled="0" errors="0" failures="0" time="1">
  <testsuite name="Kubernetes e2e suite" package="/" tests="9">
    <properties><property name="SuiteSucceeded" value="true"></property></properties>
` + strings.Join(cases, "\n") + `
  </testsuite>
</testsuites>`
}

func tc(name, status string) string {
	child := ""
	switch status {
	case "skipped":
		child = `<skipped message="skipped - the test skipped itself"></skipped>`
	case "failed":
		child = `<failure type="failed">boom</failure>`
	}
	return `    <testcase name="` + name + `" classname="Kubernetes e2e suite" status="` + status + `" time="0.1">` + child + `</testcase>`
}

const (
	a = "[sig-api-machinery] A should work [Conformance]"
	b = "[sig-apps] B should &quot;quote&quot; [Conformance]"
	c = "[sig-node] C needs a Pod [NodeConformance] [Conformance]"
)

func TestJudge(t *testing.T) {
	bUnescaped := `[sig-apps] B should "quote" [Conformance]`
	for _, tt := range []struct {
		name     string
		cases    []string
		keep     []string
		passed   []string
		problems []string
	}{{
		name:   "exactly the kept tests passed; skipped ones were not focused",
		cases:  []string{tc("[SynchronizedBeforeSuite]", "passed"), tc("[It] "+a, "passed"), tc("[It] "+b, "passed"), tc("[It] "+c, "skipped"), tc("[SynchronizedAfterSuite]", "passed")},
		keep:   []string{a, bUnescaped},
		passed: []string{a, bUnescaped},
	}, {
		name:     "a kept test skipped itself at run time",
		cases:    []string{tc("[It] "+a, "passed"), tc("[It] "+b, "skipped")},
		keep:     []string{a, bUnescaped},
		passed:   []string{a},
		problems: []string{"kept, skipped itself at run time: " + bUnescaped},
	}, {
		name:     "a kept test failed, another did not run",
		cases:    []string{tc("[It] "+a, "failed")},
		keep:     []string{a, bUnescaped},
		problems: []string{"kept, failed: " + a, "kept, did not run: " + bUnescaped},
	}, {
		name:     "a test passed that is not in the keep list",
		cases:    []string{tc("[It] "+a, "passed"), tc("[It] "+c, "passed")},
		keep:     []string{a},
		passed:   []string{a, c},
		problems: []string{"passed but not in the keep list (unreviewed): " + c},
	}, {
		name:     "a failed suite node",
		cases:    []string{tc("[SynchronizedBeforeSuite]", "failed"), tc("[It] "+a, "passed")},
		keep:     []string{a},
		passed:   []string{a},
		problems: []string{"suite node [SynchronizedBeforeSuite] failed"},
	}, {
		name:     "timed out",
		cases:    []string{tc("[It] "+a, "timedout")},
		keep:     []string{a},
		problems: []string{"kept, timedout: " + a},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			cases, err := parse(strings.NewReader(report(tt.cases...)))
			require.NoError(t, err)
			v := judge(cases, tt.keep)
			assert.Equal(t, tt.passed, v.passed)
			assert.ElementsMatch(t, tt.problems, v.problems)
		})
	}
}

func TestNames(t *testing.T) {
	got, err := names(strings.NewReader("# header\n\n" + a + " # reason one\n" + c + "\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{a, c}, got)

	_, err = names(strings.NewReader(a + "\n" + a + " # again\n"))
	assert.ErrorContains(t, err, "listed twice")
}

// TestRun runs the command's logic on files: a good run writes the pass list, a bad one fails
// and names the test.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "keep.txt")
	require.NoError(t, os.WriteFile(keep, []byte("# kept\n"+a+" # why\n"), 0o600))
	good := filepath.Join(dir, "good.xml")
	require.NoError(t, os.WriteFile(good, []byte(report(tc("[It] "+a, "passed"), tc("[It] "+c, "skipped"))), 0o600))
	bad := filepath.Join(dir, "bad.xml")
	require.NoError(t, os.WriteFile(bad, []byte(report(tc("[It] "+a, "skipped"))), 0o600))
	passed := filepath.Join(dir, "passed.txt")

	require.NoError(t, run(good, keep, passed))
	out, err := os.ReadFile(passed)
	require.NoError(t, err)
	assert.Equal(t, a+"\n", string(out))

	err = run(bad, keep, passed)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "0 of 1 kept tests passed")
	assert.Contains(t, err.Error(), "kept, skipped itself at run time: "+a)

	assert.ErrorContains(t, run(filepath.Join(dir, "missing.xml"), keep, passed), "no JUnit report")
}
