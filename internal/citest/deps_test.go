// Package citest tests the CI's own scripts: .ci/deps, which installs what
// the tests need on a fresh machine. It runs the real script with a PATH that
// holds only what a test puts there and an apt-get that records what it was
// asked for and installs each package's commands as Debian's would, so the
// script's choices are seen without touching the machine.
package citest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// provides maps a Debian package to the commands installing it puts on PATH,
// its dependencies included: redis-server depends on redis-tools.
var provides = map[string][]string{
	"redis-server":   {"redis-server", "redis-cli"},
	"redis-tools":    {"redis-cli"},
	"redis-sentinel": {"redis-sentinel"},
	"chromium":       {"chromium"},
	"firefox-esr":    {"firefox-esr"},
	"nodejs":         {"node"},
	"npm":            {"npm"},
}

// aptStub records each call in $APT_LOG, fails an install of $APT_FAIL the
// way apt does, and otherwise creates the package's commands in $STUB_BIN.
const aptStub = `#!/bin/bash
PATH=/usr/bin:/bin # its own tools; the script's PATH stays the test's
echo "$*" >> "$APT_LOG"
[ "$1" = update ] && exit 0
pkg="${@: -1}"
if [ "$pkg" = "$APT_FAIL" ]; then echo "E: Unable to correct problems, you have held broken packages." >&2; exit 100; fi
case "$pkg" in
`

func script(t *testing.T) string {
	// go test runs a package's tests in its directory (CI builds with
	// -trimpath, so the source's own path is not at hand).
	p := filepath.Join("..", "..", ".ci", "deps")
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs .ci/deps with PATH holding only the commands named in have (as
// stubs), id, tail, sudo and the apt-get stub. It returns the output, the
// apt-get calls and whether the script succeeded.
func run(t *testing.T, have []string, fail string) (out string, apt []string, ok bool) {
	t.Helper()
	bin := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range have {
		write(c, "#!/bin/bash\nexit 0\n")
	}
	for _, tool := range []string{"id", "tail"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	write("sudo", "#!/bin/bash\nexec \"$@\"\n")
	var cases strings.Builder
	cases.WriteString(aptStub)
	for pkg, cmds := range provides {
		cases.WriteString("  " + pkg + ")")
		for _, c := range cmds {
			cases.WriteString(` printf '#!/bin/bash\nexit 0\n' > "$STUB_BIN/` + c + `"; chmod +x "$STUB_BIN/` + c + `";`)
		}
		cases.WriteString(" ;;\n")
	}
	cases.WriteString("  *) echo \"E: Unable to locate package $pkg\" >&2; exit 100 ;;\nesac\n")
	write("apt-get", cases.String())

	log := filepath.Join(t.TempDir(), "apt.log")
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skipf("bash not found: %v", err)
	}
	cmd := exec.Command(bash, script(t))
	cmd.Env = []string{"PATH=" + bin, "APT_LOG=" + log, "APT_FAIL=" + fail, "STUB_BIN=" + bin, "HOME=" + t.TempDir()}
	b, err := cmd.CombinedOutput()
	if err != nil {
		if _, isExit := err.(*exec.ExitError); !isExit {
			t.Fatal(err)
		}
	}
	calls, rerr := os.ReadFile(log)
	if rerr != nil && !os.IsNotExist(rerr) {
		t.Fatal(rerr)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(calls)), "\n") {
		if l != "" {
			apt = append(apt, l)
		}
	}
	return string(b), apt, err == nil
}

// packagesOf returns the packages an apt-get install call names: its
// arguments less the options (and -o's value).
func packagesOf(args []string) []string {
	var pkgs []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-o":
			i++
		case !strings.HasPrefix(a, "-"):
			pkgs = append(pkgs, a)
		}
	}
	return pkgs
}

// installed returns the packages the apt-get calls installed, in order.
func installed(apt []string) []string {
	var pkgs []string
	for _, c := range apt {
		if f := strings.Fields(c); len(f) > 0 && f[0] == "install" {
			pkgs = append(pkgs, packagesOf(f[1:])...)
		}
	}
	return pkgs
}

func TestFreshMachine(t *testing.T) {
	// What the fresh machine has: Node.js from NodeSource with its
	// own npm, and nothing else this project needs.
	out, apt, ok := run(t, []string{"node", "npm"}, "")
	if !ok {
		t.Fatalf("the script failed:\n%s", out)
	}
	want := []string{"redis-server", "redis-sentinel", "chromium", "firefox-esr"}
	if got := installed(apt); !slices.Equal(got, want) {
		t.Errorf("installed %q, want %q, each alone (redis-cli comes with redis-server)\n%s", got, want, out)
	}
	if n := slices.Index(apt, "update -qq"); n != 0 || slices.Index(apt[1:], "update -qq") >= 0 {
		t.Errorf("apt-get calls %q: want one update, first", apt)
	}
	for _, c := range apt {
		f := strings.Fields(c)
		if f[0] != "install" {
			continue
		}
		if len(packagesOf(f[1:])) != 1 {
			t.Errorf("apt-get %s: want one package per install", c)
		}
	}
}

func TestNothingMissingAsksNothing(t *testing.T) {
	out, apt, ok := run(t, []string{"node", "npm", "redis-server", "redis-cli", "redis-sentinel", "chromium", "firefox-esr"}, "")
	if !ok || len(apt) != 0 {
		t.Errorf("ok %v, apt-get asked %q, want nothing\n%s", ok, apt, out)
	}
}

func TestAPackageWhoseCommandIsHereIsNotAsked(t *testing.T) {
	// redis-cli without redis-server (a machine with redis-tools alone),
	// and firefox instead of firefox-esr.
	out, apt, ok := run(t, []string{"node", "npm", "redis-cli", "redis-sentinel", "firefox"}, "")
	if !ok {
		t.Fatalf("the script failed:\n%s", out)
	}
	if got, want := installed(apt), []string{"redis-server", "chromium"}; !slices.Equal(got, want) {
		t.Errorf("installed %q, want %q", got, want)
	}
}

func TestNeverDebiansNodeOrNpm(t *testing.T) {
	for _, have := range [][]string{{"npm"}, {"node"}} {
		out, apt, ok := run(t, have, "")
		if ok {
			t.Errorf("with only %q the script succeeded; want a stop that names Node.js", have)
		}
		if !strings.Contains(out, "FAILED:") || !strings.Contains(out, "Node.js") {
			t.Errorf("with only %q the output does not say what to install:\n%s", have, out)
		}
		for _, p := range installed(apt) {
			if p == "npm" || p == "nodejs" {
				t.Errorf("asked apt-get for %s", p)
			}
		}
	}
}

func TestAFailedInstallNamesThePackageAndStops(t *testing.T) {
	out, apt, ok := run(t, []string{"node", "npm"}, "chromium")
	if ok {
		t.Fatalf("the script succeeded though chromium failed to install:\n%s", out)
	}
	if !strings.Contains(out, "FAILED: apt-get install chromium") {
		t.Errorf("the output does not name the package that failed:\n%s", out)
	}
	if got, want := installed(apt), []string{"redis-server", "redis-sentinel", "chromium"}; !slices.Equal(got, want) {
		t.Errorf("installed %q, want %q and a stop", got, want)
	}
}
