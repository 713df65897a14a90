package rls_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/ratebucket/ratebucket/rls"
)

// TestConfigErrorsNameFileAndLine: every problem in a file is reported
// with the file, the line and what is wrong.
func TestConfigErrorsNameFileAndLine(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n",
			`f.yaml:5: d.a: rate_limit: unknown unit "fortnight"`},
		{"domain: d\ndescriptors:\n  - key: a\n    valu: x\n",
			`f.yaml:4: unknown field "valu" in a descriptor`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n",
			`f.yaml:6: requests_per_unit: "-1" is not a whole number from 0 to 4294967295`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n",
			`f.yaml:4: d.a: rate_limit has no requests_per_unit`},
		{"domain: d\ndescriptors:\n  - key: a\n  - key: a\n",
			`f.yaml:4: duplicate descriptor d.a`},
		{"domain: d\ndescriptors:\n  - key: a\n    value: b*\n  - key: a\n    value: b*\n",
			`f.yaml:5: duplicate descriptor d.a_b*`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
			`f.yaml:4: d.a: an unlimited rate_limit takes no unit`},
		{"domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n",
			`f.yaml:3: d.a_b: share_threshold needs a wildcard value ending in '*', not "b"`},
		{"descriptors:\n  - key: a\n", `f.yaml:1: the file has no domain`},
		{"domain: d\ndescriptors:\n  - value: a\n", `f.yaml:3: descriptor has no key`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: x\n      replaces: [{name: x}]\n      unit: second\n      requests_per_unit: 1\n",
			`f.yaml:6: d.a: rate_limit "x" replaces itself`},
		{"domain: d\ndescriptors:\n  - key: a\n    shadow_mode: true\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1}\n",
			`f.yaml:4: d.a: shadow_mode without a rate_limit of its own (nested descriptors do not inherit it)`},
		{"domain: d\ndescriptors:\n  - key: a\n    value: v\n    quota_mode: true\n    rate_limit: {unlimited: true}\n",
			`f.yaml:5: d.a_v: quota_mode on an unlimited rate_limit, which refuses nothing`},
		{"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit:\n          replaces:\n            - name: typo\n          unit: second\n          requests_per_unit: 1\n",
			`f.yaml:8: d.a.b: rate_limit replaces "typo", which no rate_limit of domain "d" is named`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requests_per_unit: 52127\n",
			`f.yaml:6: d.a: 52127 per day with a burst of 52127 is not a valid token bucket`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n      burst: 0\n",
			`f.yaml:7: d.a: 10 per second with a burst of 0 is not a valid token bucket`},
		{"domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n",
			`f.yaml:4: shadow_mode: "maybe" is not true or false`},
		{"domain: d\ndomain: e\n", `f.yaml:2: "domain" given twice`},
		{"domain: [d]\n", `f.yaml:1: domain must be a single value`},
		{"domain: d\ndescriptors:\n  - key: a\n   bad indent: 1\n", `f.yaml: line 2: did not find expected '-' indicator`},
		{"", `f.yaml: empty file`},
	} {
		_, err := rls.Parse("f.yaml", []byte(c.yaml))
		if !errors.Is(err, rls.ErrConfig) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s...", c.yaml, err, c.want)
		}
	}
}

// TestConfigHonourable: what the loader refuses because it could never
// apply has its valid neighbours: a replaces naming a limit written later
// in the file, shadow_mode and quota_mode on a limit of 0 (every refusal
// reported, none enforced), and shadow_mode: false anywhere.
func TestConfigHonourable(t *testing.T) {
	_, err := rls.Parse("f.yaml", []byte(`domain: d
descriptors:
  - key: a
    shadow_mode: false
    descriptors:
      - key: b
        quota_mode: true
        rate_limit: {unit: second, requests_per_unit: 0, replaces: [{name: later}]}
  - key: c
    shadow_mode: true
    rate_limit: {name: later, unit: minute, requests_per_unit: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
}

// TestConfigDirectory: a directory loads every *.yaml and *.yml file; a
// domain in two files is an error naming both places.
func TestConfigDirectory(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "domain: a\n")
	write(t, filepath.Join(dir, "b.yml"), "# b\ndomain: b\n")
	write(t, filepath.Join(dir, "notes.txt"), "domain: ignored\n")
	c, err := rls.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Domains(), ","); got != "a,b" {
		t.Fatalf("domains %s, want a,b", got)
	}
	write(t, filepath.Join(dir, "c.yaml"), "\n\ndomain: a\n")
	_, err = rls.Load(dir)
	want := filepath.Join(dir, "c.yaml") + `:3: domain "a" is already defined at ` + filepath.Join(dir, "a.yaml") + ":1"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %s", err, want)
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLookupMatchesMostSpecific: Example 3's matching order, key and
// value before key alone, and no match at another depth.
func TestLookupMatchesMostSpecific(t *testing.T) {
	c, err := rls.Load(filepath.Join("testdata", "examples", "example3.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		d    *rlpb.RateLimitDescriptor
		want int64 // requests_per_unit, -1 for no limit
	}{
		{desc("remote_address=50.0.0.1"), 10},
		{desc("remote_address=50.0.0.5"), 0},
		{desc("remote_address=50.0.0.5", "path=/"), -1},
		{desc("other=1"), -1},
	} {
		got := int64(-1)
		if l := c.Lookup("edge_proxy_per_ip", tc.d); l != nil {
			got = int64(l.RequestsPerUnit)
		}
		if got != tc.want {
			t.Errorf("%v: requests_per_unit %d, want %d", tc.d.Entries, got, tc.want)
		}
	}
}
