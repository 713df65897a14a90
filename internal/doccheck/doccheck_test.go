package doccheck

import (
	"bufio"
	"bytes"
	"context"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/ratebucket/ratebucket/internal/redistest"
)

// libraries are the packages whose package docs are checked.
var libraries = []string{"", "algo", "store", "observe", "memstore", "redisstore", "hybrid", "httplimit", "sim"}

// nonGo lists, per package, the first line of each code block of its
// package doc that is not Go: diagrams, formulas and key layouts. Every
// other block must appear in an Example of its package.
var nonGo = map[string][]string{
	"algo":      {"refill: Rate tokens per Period, continuously"},
	"hybrid":    {"tokens(t) ≤ min(capacity, tokens(t0) + rate·(t − t0))", "N failures in a row, or a failure ratio over a window"},
	"httplimit": {"h:default:user{42}                 one limit, the user's"},
}

// maxReadmeLines is how long README.md may grow.
const maxReadmeLines = 200

// goGet is the line README.md shows before its first program.
const goGet = "go get github.com/ratebucket/ratebucket"

// firstProgram is what the README's first program prints, its last
// retry-after aside (it depends on how long the program took).
var firstProgram = regexp.MustCompile(`^request 1: allowed true, retry after 0s
request 2: allowed true, retry after 0s
request 3: allowed true, retry after 0s
request 4: allowed false, retry after (\S+)
$`)

// block is one code block of a page or a package doc.
type block struct {
	where string // file:line
	lang  string
	text  string
}

// example is the body of one Example function.
type example struct {
	name   string // file:Func
	module string // the directory of its go.mod
	dir    string // its package's directory
	body   string // normalized
}

// TestReadme checks README.md's shape and runs its first program.
func TestReadme(t *testing.T) {
	root := moduleRoot(t)
	src, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(src, []byte("\n")); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to docs/", n, maxReadmeLines)
	}
	blocks := fences(t, root, "README.md")
	first := slices.IndexFunc(blocks, func(b block) bool { return b.lang == "go" })
	if first < 0 {
		t.Fatal("README.md shows no Go")
	}
	at := -1
	for i, line := range strings.Split(string(src), "\n") {
		if strings.TrimSpace(line) == goGet {
			at = i + 1
			break
		}
	}
	if firstLine := lineOf(blocks[first].where); at < 0 || at > firstLine {
		t.Errorf("README.md must show %q before its first program (line %d); found at line %d", goGet, firstLine, at)
	}
	if !isProgram(blocks[first].text) {
		t.Fatalf("%s: the README's first Go block is not a complete program", blocks[first].where)
	}
	out := runProgram(t, root, blocks[first])
	m := firstProgram.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("%s printed\n%s\nwant four requests, the last denied:\n%s", blocks[first].where, out, firstProgram)
	}
	if d, err := time.ParseDuration(m[1]); err != nil || d <= 0 || d > time.Second {
		t.Errorf("%s: the denied request's retry-after is %s, want in (0, 1s]", blocks[first].where, m[1])
	}
}

// TestPages runs every program of README.md and docs/*.md and finds every
// Go fragment of theirs in an Example, then vets those Examples.
func TestPages(t *testing.T) {
	root := moduleRoot(t)
	exs := examples(t, root)
	vet := map[string]map[string]bool{} // module → package dirs to vet
	for _, page := range pages(t, root) {
		for _, b := range fences(t, root, page) {
			if b.lang != "go" {
				continue
			}
			if isProgram(b.text) {
				t.Run(b.where, func(t *testing.T) { runProgram(t, root, b) })
				continue
			}
			ex, ok := findExample(b.text, exs)
			if !ok {
				t.Errorf("%s: this Go fragment is in no Example function; put it in one, verbatim, or make it a complete program:\n%s", b.where, b.text)
				continue
			}
			t.Logf("%s: in %s", b.where, ex.name)
			addVet(vet, ex)
		}
	}
	vetAll(t, vet)
}

// TestPackageDocs finds every code block of the library's package docs in
// an Example of its package, unless nonGo lists it.
func TestPackageDocs(t *testing.T) {
	root := moduleRoot(t)
	exs := examples(t, root)
	vet := map[string]map[string]bool{}
	for _, pkg := range libraries {
		dir := filepath.Join(root, pkg)
		var own []example
		for _, ex := range exs {
			if ex.dir == dir {
				own = append(own, ex)
			}
		}
		listed := map[string]bool{}
		for _, b := range packageDoc(t, dir) {
			first := strings.TrimSpace(strings.SplitN(b.text, "\n", 2)[0])
			if slices.Contains(nonGo[pkg], first) {
				listed[first] = true
				if parsesAsGo(b.text) {
					t.Errorf("%s: a block listed as not Go parses as Go:\n%s", b.where, b.text)
				}
				continue
			}
			ex, ok := findExample(b.text, own)
			if !ok {
				t.Errorf("%s: this block of the package doc is in no Example of package %s; put it in one, verbatim, or list it in nonGo if it is not Go:\n%s", b.where, pkg, b.text)
				continue
			}
			t.Logf("%s: in %s", b.where, ex.name)
			addVet(vet, ex)
		}
		for _, first := range nonGo[pkg] {
			if !listed[first] {
				t.Errorf("nonGo lists a block of package %s that its doc no longer has: %q", pkg, first)
			}
		}
	}
	vetAll(t, vet)
}

// TestLinks checks that every relative link of README.md and docs/*.md
// names a file, and a heading where it names one.
func TestLinks(t *testing.T) {
	root := moduleRoot(t)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages(t, root) {
		src, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := filepath.Join(root, page)
				if path != "" {
					file = filepath.Join(filepath.Dir(file), path)
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: link %s: %v", page, i+1, target, err)
					continue
				}
				if anchor != "" && strings.HasSuffix(file, ".md") && !slices.Contains(anchors(t, file), anchor) {
					t.Errorf("%s:%d: link %s: %s has no heading #%s", page, i+1, target, filepath.Base(file), anchor)
				}
			}
		}
	}
}

// moduleRoot returns the directory of the library's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.HasPrefix(mod, []byte("module github.com/ratebucket/ratebucket\n")) {
		t.Fatalf("%s is not the library's root: %v", root, err)
	}
	return root
}

// pages returns README.md and the docs/*.md pages, relative to root.
func pages(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, d := range docs {
		out = append(out, filepath.Join("docs", filepath.Base(d)))
	}
	return out
}

// fences returns the fenced code blocks of a Markdown page, each of which
// must name its language.
func fences(t *testing.T, root, page string) []block {
	t.Helper()
	f, err := os.Open(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out  []block
		cur  *block
		body []string
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		switch {
		case cur == nil && fence:
			cur = &block{where: page + ":" + strconv.Itoa(n), lang: strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "```"))}
			body = body[:0]
			if cur.lang == "" {
				t.Errorf("%s: a fenced block without a language: write ```go, ```sh, ```text...", cur.where)
			}
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.text = strings.Join(body, "\n") + "\n"
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body = append(body, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Errorf("%s: fence never closed", cur.where)
	}
	return out
}

// packageDoc returns the code blocks of the package doc of the package in
// dir, wherever the doc comment is.
func packageDoc(t *testing.T, dir string) []block {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []block
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc == nil {
			continue
		}
		var p comment.Parser
		for _, b := range p.Parse(f.Doc.Text()).Content {
			if c, ok := b.(*comment.Code); ok {
				out = append(out, block{where: filepath.Base(dir) + "/" + filepath.Base(file), lang: "go", text: c.Text})
			}
		}
	}
	if len(out) == 0 {
		t.Logf("package %s: its doc has no code block", filepath.Base(dir))
	}
	return out
}

// examples returns the body of every Example function in the repository,
// nested modules included.
func examples(t *testing.T, root string) []example {
	t.Helper()
	var out []example
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules" || name == "js") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
				continue
			}
			body := src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset]
			rel, _ := filepath.Rel(root, path)
			out = append(out, example{
				name:   rel + ":" + fn.Name.Name,
				module: moduleOf(root, filepath.Dir(path)),
				dir:    filepath.Dir(path),
				body:   normalize(string(body)),
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// moduleOf returns the directory of the go.mod that holds dir.
func moduleOf(root, dir string) string {
	for d := dir; d != root && strings.HasPrefix(d, root); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return root
}

// findExample returns the first Example whose body holds the fragment,
// whitespace aside; a line of the fragment holding only "..." stands for
// any code, so the parts around it must appear in order.
func findExample(fragment string, exs []example) (example, bool) {
	var parts []string
	var cur []string
	for _, line := range strings.Split(fragment, "\n") {
		if strings.TrimSpace(line) == "..." {
			parts = append(parts, normalize(strings.Join(cur, "\n")))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	parts = append(parts, normalize(strings.Join(cur, "\n")))
	for _, ex := range exs {
		at, ok := 0, true
		for _, p := range parts {
			i := strings.Index(ex.body[at:], p)
			if i < 0 {
				ok = false
				break
			}
			at += i + len(p)
		}
		if ok {
			return ex, true
		}
	}
	return example{}, false
}

// normalize turns every run of white space into one space.
func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

// isProgram reports whether a Go block is a complete program.
func isProgram(src string) bool { return strings.HasPrefix(strings.TrimSpace(src), "package main") }

// parsesAsGo reports whether src is Go: declarations, or statements.
func parsesAsGo(src string) bool {
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", "package p\n"+src, 0); err == nil {
		return true
	}
	_, err := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+src+"\n}", 0)
	return err == nil
}

// runProgram builds a complete program inside the module, so that its
// imports are this checkout's packages, runs it, and returns what it
// printed; it fails the test unless both exit 0. A program that dials
// localhost:6379 dials a redis-server started for the test instead.
func runProgram(t *testing.T, root string, b block) string {
	t.Helper()
	src := b.text
	if strings.Contains(src, "localhost:6379") {
		src = strings.ReplaceAll(src, "localhost:6379", redistest.Start(t).Addr)
	}
	dir, err := os.MkdirTemp(root, ".doccheck-") // a leading dot keeps ./... away
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "program")
	// -race, and the caller's GOFLAGS kept: CI builds everything in the
	// race build with its own flags (go vet -race, go test -race), so the
	// program's packages come from the cache. Replacing GOFLAGS instead
	// rebuilt the standard library and go-redis for each program: 190 s of
	// this package's run on a fresh machine, against 20 s.
	build := exec.CommandContext(ctx, "go", "build", "-race", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -buildvcs=false"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s does not build: %v\n%s\n%s", b.where, err, out, src)
	}
	run := exec.CommandContext(ctx, bin)
	run.Dir = dir
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("%s: the program failed: %v\nstdout:\n%s\nstderr:\n%s", b.where, err, stdout.String(), stderr.String())
	}
	t.Logf("%s printed:\n%s", b.where, stdout.String())
	return stdout.String()
}

// addVet records the package of ex, to be vetted.
func addVet(vet map[string]map[string]bool, ex example) {
	if vet[ex.module] == nil {
		vet[ex.module] = map[string]bool{}
	}
	vet[ex.module][ex.dir] = true
}

// vetAll vets the packages (their tests and so their Examples included)
// whose Examples hold a fragment: a fragment that stops compiling fails here.
//
// .ci/run sets RATEBUCKET_CI_VETS_ALL: it vets and tests every module itself
// (go vet -race, then go test -race, which compiles every Example), so the
// same packages are not compiled twice, at once, by two processes.
func vetAll(t *testing.T, vet map[string]map[string]bool) {
	t.Helper()
	if os.Getenv("RATEBUCKET_CI_VETS_ALL") != "" {
		t.Logf("not vetting %d modules' Examples here: .ci/run vets and tests every module", len(vet))
		return
	}
	for module, dirs := range vet {
		args := []string{"vet", "-race"} // the race build, which CI has cached
		for dir := range dirs {
			rel, err := filepath.Rel(module, dir)
			if err != nil {
				t.Fatal(err)
			}
			args = append(args, "./"+filepath.ToSlash(rel))
		}
		slices.Sort(args[2:])
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = module
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("go %s (in %s): %v\n%s", strings.Join(args, " "), module, err, out)
		}
	}
}

// anchors returns the GitHub anchors of a Markdown file's headings.
func anchors(t *testing.T, file string) []string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var out []string
	inFence := false
	for _, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out = append(out, a+"-"+strconv.Itoa(n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

// lineOf returns the line number of a file:line position.
func lineOf(where string) int {
	_, n, _ := strings.Cut(where, ":")
	v, _ := strconv.Atoi(n)
	return v
}
