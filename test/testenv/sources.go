package testenv

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ConsultSources opens every Go file of the module, go.mod and go.sum, and the deploy/ manifests
// (which the binary embeds or the tests apply), and reads one byte of each. A package whose tests
// run the operator's binary (go build in a child process) imports none of the code it runs, so
// Go's test cache would answer "(cached)" after a change to that code; the files a test opens
// are part of the cache's key, so after this a change of any of them runs the tests again. Call it
// from a test (the files opened before the tests start, in TestMain, are not recorded). An error
// leaves caching as it would be without it.
func ConsultSources() {
	root, err := moduleRoot()
	if err != nil {
		return
	}
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") || strings.HasPrefix(rel, "deploy"+string(filepath.Separator)) || rel == "go.mod" || rel == "go.sum" {
			if f, err := os.Open(path); err == nil {
				_, _ = f.Read(make([]byte, 1))
				_ = f.Close()
			}
		}
		return nil
	})
}
