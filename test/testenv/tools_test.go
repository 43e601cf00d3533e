package testenv

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMissingTool runs TestMissingToolChild in a child process, with and without CI set: with CI
// a missing tool fails the test and names the tool, without it the test is skipped.
func TestMissingTool(t *testing.T) {
	if os.Getenv("MISSING_TOOL_CHILD") != "" {
		t.Skip("the child's own run")
	}
	for _, tt := range []struct {
		ci, want string
		fails    bool
	}{
		{ci: "true", want: "--- FAIL: TestMissingToolChild", fails: true},
		{ci: "", want: "--- SKIP: TestMissingToolChild"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingToolChild$", "-test.v")
		cmd.Env = append(os.Environ(), "MISSING_TOOL_CHILD=1", "CI="+tt.ci)
		out, err := cmd.CombinedOutput()
		if got := err != nil; got != tt.fails {
			t.Errorf("CI=%q: child failed = %v, want %v:\n%s", tt.ci, got, tt.fails, out)
		}
		if !strings.Contains(string(out), tt.want) || !strings.Contains(string(out), "kubectl on the PATH is needed: not found") {
			t.Errorf("CI=%q: want %q and the tool's name in:\n%s", tt.ci, tt.want, out)
		}
	}
}

func TestMissingToolChild(t *testing.T) {
	if os.Getenv("MISSING_TOOL_CHILD") == "" {
		t.Skip("run by TestMissingTool")
	}
	MissingTool(t, "kubectl on the PATH", errors.New("not found"))
}
