package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"kind, offline":                                    "kind-offline",
		"Encryption at rest (local)":                       "encryption-at-rest-local",
		"References across namespaces need the verb `use`": "references-across-namespaces-need-the-verb-use",
		"With openMCP's operator":                          "with-openmcps-operator",
		"On a busy machine (issue 39)":                     "on-a-busy-machine-issue-39",
		"ClusterRequests: \"a cluster for purpose X\"":     "clusterrequests-a-cluster-for-purpose-x",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("b.md", "# B\n\n## Part one\n\n## Part one\n")
	a := write("a.md", "# A\n\n## Here\n\n"+
		"[ok](b.md) [ok](b.md#part-one) [ok](b.md#part-one-1) [ok](#here) [web](https://example.com/x#y)\n"+
		"[bad](c.md) [bad](b.md#part-two) [bad](#there)\n"+
		"`[code](nowhere.md)`\n```\n[code](nowhere.md)\n```\n")
	problems, n, err := check(a)
	if err != nil {
		t.Fatal(err)
	}
	if n != 7 || len(problems) != 3 {
		t.Errorf("got %d links, problems %q; want 7 links, 3 problems", n, problems)
	}
}
