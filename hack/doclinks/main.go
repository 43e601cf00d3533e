// Command doclinks checks the relative links of the repository's Markdown: every [text](path) and
// [text](path#anchor) of README.md and docs/**/*.md outside code must name a file that exists and,
// with an anchor, a heading of that file (as GitHub makes anchors of headings). It prints each broken
// link and exits 1 if there is one:
//
//	go run ./hack/doclinks            # from the repository's root (make docs-check)
//
// Links with a scheme (https:, mailto:) are not followed.
package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

func main() {
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "doclinks:", err)
		os.Exit(1)
	}
	slices.Sort(files[1:])
	links, broken := 0, 0
	for _, f := range files {
		problems, n, err := check(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "doclinks:", err)
			os.Exit(1)
		}
		links += n
		for _, p := range problems {
			fmt.Println(p)
		}
		broken += len(problems)
	}
	fmt.Printf("%d relative links in %d files, %d broken\n", links, len(files), broken)
	if broken > 0 {
		os.Exit(1)
	}
}

var (
	fenced  = regexp.MustCompile("(?s)```.*?```")
	span    = regexp.MustCompile("`[^`\n]*`")
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	scheme  = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
	notSlug = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// prose is a Markdown text without its code blocks and code spans, where no link is.
func prose(text string) string {
	return span.ReplaceAllString(fenced.ReplaceAllString(text, ""), "")
}

// check returns the broken relative links of the Markdown file f and how many it has.
func check(f string) ([]string, int, error) {
	data, err := os.ReadFile(f)
	if err != nil {
		return nil, 0, err
	}
	var problems []string
	n := 0
	for _, m := range link.FindAllStringSubmatch(prose(string(data)), -1) {
		target := m[1]
		if scheme.MatchString(target) {
			continue
		}
		n++
		path, anchor, _ := strings.Cut(target, "#")
		dest := f
		if path != "" {
			dest = filepath.Join(filepath.Dir(f), path)
		}
		info, err := os.Stat(dest)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s: %s does not exist", f, target, dest))
			continue
		}
		if anchor == "" {
			continue
		}
		if info.IsDir() || !strings.HasSuffix(dest, ".md") {
			problems = append(problems, fmt.Sprintf("%s: %s: an anchor on %s, which is not a Markdown file", f, target, dest))
			continue
		}
		anchors, err := anchorsOf(dest)
		if err != nil {
			return nil, 0, err
		}
		if !anchors[anchor] {
			problems = append(problems, fmt.Sprintf("%s: %s: %s has no heading #%s", f, target, dest, anchor))
		}
	}
	return problems, n, nil
}

// anchorsOf returns the anchors GitHub makes of the headings of the Markdown file f.
func anchorsOf(f string) (map[string]bool, error) {
	data, err := os.ReadFile(f)
	if err != nil {
		return nil, err
	}
	out, seen := map[string]bool{}, map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fenced.ReplaceAllString(string(data), ""), -1) {
		s := slug(m[1])
		if k := seen[s]; k > 0 {
			out[fmt.Sprintf("%s-%d", s, k)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out, nil
}

// slug is GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens.
func slug(h string) string {
	h = notSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), "")
	return strings.ReplaceAll(h, " ", "-")
}
