package bench

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// benchmarksMD is the reader's page of results, at the repository's root.
const benchmarksMD = "../BENCHMARKS.md"

// maxBenchmarksMDLines bounds BENCHMARKS.md: results, method and caveats
// fit in it; the history of what each change bought is bench/HISTORY.md.
const maxBenchmarksMDLines = 300

var (
	// hexToken finds words of 7 to 40 hex digits; a commit hash is one
	// that has both a digit and a letter.
	hexToken = regexp.MustCompile(`\b[0-9a-fA-F]{7,40}\b`)
	digit    = regexp.MustCompile(`[0-9]`)
	letter   = regexp.MustCompile(`[a-fA-F]`)
	// nonResults are the sections whose tables describe the method, not
	// results: they need no peer, no ratio and no command.
	nonResults = regexp.MustCompile(`(?i)^## (method|caveats|history)`)
	peerCell   = regexp.MustCompile(`(?i)peer`)
	ratioCell  = regexp.MustCompile(`(?i)÷|ratio`)
	// command is how a section gives the command that reproduces its
	// table: a ```sh (or ```bash) block, or a line "Command: `...`".
	shFence     = regexp.MustCompile("^```(sh|bash)\\s*$")
	commandLine = regexp.MustCompile("^Command: `[^`]+`")
)

// mdSection is a "## " section of BENCHMARKS.md (the part before the
// first one has an empty heading).
type mdSection struct {
	heading string
	line    int        // 1-based line of the heading
	tables  []int      // per table, the 1-based line of its header row
	headers [][]string // per table, its header's cells
	command bool
}

// TestBenchmarksMD keeps BENCHMARKS.md a page for the reader: at most 300
// lines; no commit hash anywhere, code blocks included (a hash in a
// command pins a reader to a tree they do not have; history with hashes
// is bench/HISTORY.md); no heading named after an issue; and every
// results table (a table outside the Method, Caveats and History
// sections) has a peer column and a ratio column, in a section that gives
// the command reproducing it.
func TestBenchmarksMD(t *testing.T) {
	raw, err := os.ReadFile(benchmarksMD)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) > maxBenchmarksMDLines {
		t.Errorf("%s has %d lines, want at most %d (history goes to bench/HISTORY.md)", benchmarksMD, len(lines), maxBenchmarksMDLines)
	}

	var sections []*mdSection
	cur := &mdSection{}
	sections = append(sections, cur)
	inCode, inTable := false, false
	for i, l := range lines {
		n := i + 1
		for _, tok := range hexToken.FindAllString(l, -1) {
			if digit.MatchString(tok) && letter.MatchString(tok) {
				t.Errorf("%s:%d: %q looks like a commit hash: history with hashes goes to bench/HISTORY.md", benchmarksMD, n, tok)
			}
		}
		if strings.HasPrefix(l, "```") {
			if !inCode && shFence.MatchString(l) {
				cur.command = true
			}
			inCode = !inCode
			inTable = false
			continue
		}
		if inCode {
			continue
		}
		if strings.HasPrefix(l, "#") {
			if strings.Contains(strings.ToLower(l), "issue") {
				t.Errorf("%s:%d: heading %q is named after an issue", benchmarksMD, n, l)
			}
			if strings.HasPrefix(l, "## ") {
				cur = &mdSection{heading: l, line: n}
				sections = append(sections, cur)
			}
		}
		if commandLine.MatchString(l) {
			cur.command = true
		}
		isRow := strings.HasPrefix(strings.TrimSpace(l), "|")
		if isRow && !inTable {
			cur.tables = append(cur.tables, n)
			cur.headers = append(cur.headers, splitRow(l))
		}
		inTable = isRow
	}
	if inCode {
		t.Errorf("%s: a code block is never closed", benchmarksMD)
	}

	results := 0
	for _, s := range sections {
		if len(s.tables) == 0 || nonResults.MatchString(s.heading) {
			continue
		}
		name := s.heading
		if name == "" {
			name = "(before the first section)"
		}
		for j, hdr := range s.headers {
			results++
			if !anyMatch(hdr, peerCell) || !anyMatch(hdr, ratioCell) {
				t.Errorf("%s:%d: results table in %q has columns %q: want a peer column and a ratio column (÷ or \"ratio\")", benchmarksMD, s.tables[j], name, hdr)
			}
		}
		if !s.command {
			t.Errorf("%s:%d: section %q has a results table but no command reproducing it (a ```sh block or a line \"Command: `...`\")", benchmarksMD, s.line, name)
		}
	}
	if results == 0 {
		t.Errorf("%s has no results table", benchmarksMD)
	}
}

// splitRow returns the cells of a Markdown table row.
func splitRow(l string) []string {
	l = strings.TrimSpace(l)
	l = strings.TrimPrefix(l, "|")
	l = strings.TrimSuffix(l, "|")
	cells := strings.Split(l, "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

func anyMatch(cells []string, re *regexp.Regexp) bool {
	for _, c := range cells {
		if re.MatchString(c) {
			return true
		}
	}
	return false
}
