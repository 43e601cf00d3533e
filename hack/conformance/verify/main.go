// Command verify judges a `make conformance` run by its JUnit report, not by e2e.test's exit
// code: exactly the tests of hack/conformance/keep.txt must have passed. A kept test that failed,
// was skipped at run time (a test may skip itself, e.g. for a missing feature: ginkgo counts
// that as success), or did not run at all fails the run, and so does a test that passed but is
// not in keep.txt (the focus or skip list selected something unreviewed) or a failed suite node
// (BeforeSuite, AfterSuite). It prints every passed test, one per line, to --passed.
//
//	go run ./hack/conformance/verify --junit .conformance/report/junit_01.xml \
//	    --keep hack/conformance/keep.txt --passed .conformance/passed.txt
package main

import (
	"bufio"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

func main() {
	junit := flag.String("junit", "", "the JUnit report e2e.test wrote (--report-dir/junit_01.xml)")
	keep := flag.String("keep", "", "the list of tests that must pass (hack/conformance/keep.txt)")
	passed := flag.String("passed", "", "where to write the names of the passed tests (empty: standard output)")
	flag.Parse()
	if err := run(*junit, *keep, *passed); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(junitPath, keepPath, passedPath string) error {
	if junitPath == "" || keepPath == "" {
		return errors.New("usage: verify --junit FILE --keep FILE [--passed FILE]")
	}
	kf, err := os.Open(keepPath)
	if err != nil {
		return err
	}
	defer kf.Close()
	keep, err := names(kf)
	if err != nil {
		return fmt.Errorf("%s: %w", keepPath, err)
	}
	jf, err := os.Open(junitPath)
	if err != nil {
		return fmt.Errorf("no JUnit report (did e2e.test run with --report-dir?): %w", err)
	}
	defer jf.Close()
	cases, err := parse(jf)
	if err != nil {
		return fmt.Errorf("%s: %w", junitPath, err)
	}
	v := judge(cases, keep)
	out := os.Stdout
	if passedPath != "" {
		if out, err = os.Create(passedPath); err != nil {
			return err
		}
		defer out.Close()
	}
	for _, n := range v.passed {
		fmt.Fprintln(out, n)
	}
	if len(v.problems) > 0 {
		return fmt.Errorf("%d of %d kept tests passed; %d problems:\n  %s", v.keptPassed, len(keep), len(v.problems), strings.Join(v.problems, "\n  "))
	}
	fmt.Fprintf(os.Stderr, "all %d tests of the keep list passed, and no other test ran\n", len(keep))
	return nil
}

// names reads a list file: one test name per line, an optional " # reason" after it, comment
// lines starting with '#', blank lines ignored (as hack/conformance.sh reads it).
func names(r io.Reader) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		name, _, _ := strings.Cut(line, " # ")
		if seen[name] {
			return nil, fmt.Errorf("%q is listed twice", name)
		}
		seen[name] = true
		out = append(out, name)
	}
	return out, sc.Err()
}

// testCase is the part of a ginkgo JUnit test case the verdict needs. Ginkgo names a case
// "[<node type>] <full text>" (labels are omitted by the e2e framework's report config, and the
// conformance tests carry "[Conformance]" in their text); its status is the spec's state.
type testCase struct {
	Name    string    `xml:"name,attr"`
	Status  string    `xml:"status,attr"`
	Skipped *struct{} `xml:"skipped"`
	Failure *struct{} `xml:"failure"`
	Error   *struct{} `xml:"error"`
}

func parse(r io.Reader) ([]testCase, error) {
	var doc struct {
		Suites []struct {
			Cases []testCase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, err
	}
	var out []testCase
	for _, s := range doc.Suites {
		out = append(out, s.Cases...)
	}
	return out, nil
}

type verdict struct {
	passed     []string // every passed test, sorted
	keptPassed int
	problems   []string
}

// judge compares the cases with the keep list.
func judge(cases []testCase, keep []string) verdict {
	var v verdict
	state := map[string]string{} // test name -> status
	for _, c := range cases {
		nodeType, text, _ := strings.Cut(c.Name, " ")
		status := c.Status
		if status == "" { // an older report: read the child elements
			switch {
			case c.Failure != nil || c.Error != nil:
				status = "failed"
			case c.Skipped != nil:
				status = "skipped"
			default:
				status = "passed"
			}
		}
		if nodeType != "[It]" {
			// Suite set-up and clean-up nodes: only their failure matters.
			if status != "passed" && status != "skipped" {
				v.problems = append(v.problems, fmt.Sprintf("suite node %s %s", c.Name, status))
			}
			continue
		}
		state[text] = status
		if status == "passed" {
			v.passed = append(v.passed, text)
		}
	}
	slices.Sort(v.passed)
	kept := map[string]bool{}
	for _, n := range keep {
		kept[n] = true
		switch s, ran := state[n]; {
		case !ran:
			v.problems = append(v.problems, "kept, did not run: "+n)
		case s == "passed":
			v.keptPassed++
		case s == "skipped":
			v.problems = append(v.problems, "kept, skipped itself at run time: "+n)
		default:
			v.problems = append(v.problems, fmt.Sprintf("kept, %s: %s", s, n))
		}
	}
	for _, n := range v.passed {
		if !kept[n] {
			v.problems = append(v.problems, "passed but not in the keep list (unreviewed): "+n)
		}
	}
	return v
}
