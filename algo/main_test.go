package algo_test

import (
	"flag"
	"os"
	"testing"
)

// minChecks is the number of cases each rapid property runs by default, as
// issue 2 asks of CI. An explicit -rapid.checks flag or RAPID_CHECKS
// environment variable wins; -short divides it by 5, as rapid always does.
const minChecks = "1000"

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if _, env := os.LookupEnv("RAPID_CHECKS"); !set && !env {
		if err := flag.Set("rapid.checks", minChecks); err != nil {
			panic(err) // rapid renamed its flag: fail loudly, not quietly with 100 cases
		}
	}
	os.Exit(m.Run())
}
