package testenv

import (
	"fmt"
	"os"
	"testing"
)

// MissingTool ends a test that cannot run here for want of a tool (kubectl, a Docker engine,
// root): with CI set it fails, naming the tool, because CI provides every tool and a skipped test
// would pass unseen; elsewhere it skips. Call it from the test's goroutine only.
func MissingTool(t testing.TB, tool string, why error) {
	t.Helper()
	msg := fmt.Sprintf("%s is needed: %v", tool, why)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set: a missing tool fails the test)", msg)
	}
	t.Skip(msg)
}
