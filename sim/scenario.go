package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// Scenario is a named traffic pattern drawn from the article this library
// answers: who sends requests, how, under which key and policy. List them
// with [Scenarios], run one with [Run].
type Scenario struct {
	// Name is the identifier to pass in [Config.Scenario], such as
	// "mobile".
	Name string
	// Summary is one sentence for a listing.
	Summary string
	// Policy is the scenario's main policy (the one [Config.Policy]
	// replaces): the per-key limit, or the per-IP limit in the campus
	// NAT scenarios, whose user tiers are fixed.
	Policy algo.Policy
	// Duration is how much virtual time a run covers by default.
	Duration time.Duration
	// Focus is the class whose first client's bucket the [Timeline]
	// follows.
	Focus string
	// Instant reports that the scenario is about an instant (the
	// boundary spike): its charts zoom on the worst interval.
	Instant bool

	// lifetime is the Lifetime of a [Leased] run's leases (zero:
	// hybrid.DefaultLifetime); shards, above 1, makes a shared memstore
	// that many, keys spread over them as a Redis Cluster's masters.
	lifetime time.Duration
	shards   int
	classes  func(base algo.Policy) []class
	// debt: the scenario settles costs into debt, so its law is
	// algo.Policy.SettleBound, a slack of one fill time.
	debt bool
}

// class is a group of alike clients.
type class struct {
	name  string
	count int
	// key returns client i's bucket key.
	key func(i int) string
	// policy limits the key; entitled (zero: policy) is the policy the
	// client is entitled to, against whose long-run rate legitimacy is
	// judged. They differ when users behind one IP share its bucket.
	policy, entitled algo.Policy
	// gen returns client i's traffic. pair is a stream seeded by i alone
	// (not by the class), so classes can share session times.
	gen func(i int, pair *rand.Rand) generator
	// op, when set, serves each request instead of a plain Take: a
	// refund by outcome, a reservation, a lease (see scenario_ops.go).
	op op
}

// The article's policies.
var (
	// perMinute100 is express-rate-limit's 100 per minute, as a bucket
	// of 100 refilled at 100 per minute (a fixed window of 60 s).
	perMinute100 = algo.PerMinute(100).Burst(100)
	// api is the article's token bucket: burst 100, 2 per second.
	api = algo.PerSecond(2).Burst(100)
	// The campus tiers: anonymous 50/min, authenticated 200/min, paid
	// 2,000/min, each with a burst of one minute's worth.
	anonymous     = algo.PerMinute(50).Burst(50)
	authenticated = algo.PerMinute(200).Burst(200)
	paid          = algo.PerMinute(2000).Burst(2000)
)

func browsing(lo, hi, thinkMin, thinkMax int64) func(int, *rand.Rand) generator {
	return func(int, *rand.Rand) generator {
		return &sessions{first: thinkMax, gapMin: thinkMin, gapMax: thinkMax, plan: pageViews(lo, hi)}
	}
}

// webUsers are n ordinary signed-in users, each on their own key,
// viewing a page of 3 to 8 requests every 10 to 50 s: the bystanders of
// the attack scenarios.
func webUsers(n int, base algo.Policy) class {
	return class{name: "web", count: n, key: keyf("user:web:%d"), policy: base, gen: browsing(3, 8, 10*sec, 50*sec)}
}

func keyf(format string) func(int) string {
	return func(i int) string { return fmt.Sprintf(format, i) }
}

// campus returns the users behind one campus NAT. byUser keys signed-in
// users by user id with their tier's policy (anonymous ones share the
// IP's anonymous bucket: the composite "user if known, else IP"); otherwise
// every user shares the IP's bucket under base.
func campus(base algo.Policy, byUser bool) []class {
	const ip = "ip:10.8.0.1"
	tier := func(name string, n int, p algo.Policy, view [4]int64) class {
		c := class{name: name, count: n, key: func(int) string { return ip }, policy: base, entitled: p,
			gen: browsing(view[0], view[1], view[2]*sec, view[3]*sec)}
		if byUser {
			c.policy = p
			if name != "anonymous" {
				c.key = keyf("user:" + name + ":%d")
			}
		}
		return c
	}
	anon := anonymous
	if byUser {
		anon = base // the scenario's policy is the anonymous tier
	}
	return []class{
		tier("anonymous", 16, anon, [4]int64{1, 3, 30, 90}),
		tier("authenticated", 18, authenticated, [4]int64{3, 8, 10, 30}),
		tier("paid", 6, paid, [4]int64{3, 8, 2, 8}),
	}
}

var scenarios = []Scenario{{
	Name:    "mobile",
	Summary: "a phone opens its feed (12 requests) and refreshes 3 times in a minute while a laptop on the same IP loads 64 in 8 s",
	Policy:  perMinute100, Duration: 20 * time.Minute, Focus: "mobile",
	classes: func(base algo.Policy) []class {
		household := func(web bool) func(int, *rand.Rand) generator {
			plan := feedOpen
			if web {
				plan = webSession
			}
			return func(_ int, pair *rand.Rand) generator {
				return &sessions{starts: pair, first: 5 * mn, gapMin: 2 * mn, gapMax: 12 * mn, plan: plan}
			}
		}
		return []class{
			{name: "mobile", count: 50, key: keyf("ip:10.1.%d.1"), policy: base, gen: household(false)},
			{name: "web", count: 50, key: keyf("ip:10.1.%d.1"), policy: base, gen: household(true)},
		}
	},
}, {
	Name:    "boundary-spike",
	Summary: "an attacker reads the reset time and fires a full limit just before a window ends and again just after",
	Policy:  perMinute100, Duration: 10 * time.Minute, Focus: "attacker", Instant: true,
	classes: func(base algo.Policy) []class {
		return []class{
			{name: "attacker", count: 1, key: keyf("ip:203.0.113.%d"), policy: base,
				gen: func(int, *rand.Rand) generator { return &spiker{capacity: base.Capacity()} }},
			webUsers(20, base),
		}
	},
}, {
	Name:    "sensor",
	Summary: "steady sensors, one reading every 5 s each",
	Policy:  api, Duration: 10 * time.Minute, Focus: "sensor",
	classes: func(base algo.Policy) []class {
		return []class{{name: "sensor", count: 50, key: keyf("device:%d"), policy: base,
			gen: func(int, *rand.Rand) generator { return &steady{period: 5 * sec} }}}
	},
}, {
	Name:    "abuser",
	Summary: "one client at 18,000 requests a minute among ordinary web users",
	Policy:  api, Duration: 2 * time.Minute, Focus: "abuser",
	classes: func(base algo.Policy) []class {
		return []class{
			{name: "abuser", count: 1, key: keyf("ip:198.51.100.%d"), policy: base,
				gen: func(int, *rand.Rand) generator { return &flood{mean: mn / 18_000} }},
			webUsers(50, base),
		}
	},
}, {
	Name:    "campus-nat-ip",
	Summary: "40 users of three tiers behind one campus NAT, keyed by IP",
	Policy:  perMinute100, Duration: 15 * time.Minute, Focus: "authenticated",
	classes: func(base algo.Policy) []class { return campus(base, false) },
}, {
	Name:    "campus-nat-user",
	Summary: "the same campus keyed by user if signed in, else by IP, with tiers 50, 200 and 2,000 a minute",
	Policy:  anonymous, Duration: 15 * time.Minute, Focus: "anonymous",
	classes: func(base algo.Policy) []class { return campus(base, true) },
}, {
	Name:    "cost",
	Summary: "cheap reads (cost 1) mixed with photo uploads (cost 10) and AI calls (cost 25)",
	Policy:  api, Duration: 15 * time.Minute, Focus: "uploader",
	classes: func(base algo.Policy) []class {
		return []class{
			{name: "reader", count: 20, key: keyf("user:reader:%d"), policy: base, gen: browsing(3, 8, 5*sec, 25*sec)},
			{name: "uploader", count: 10, key: keyf("user:uploader:%d"), policy: base,
				gen: func(int, *rand.Rand) generator {
					return &sessions{first: 2 * mn, gapMin: 3 * mn, gapMax: 7 * mn, plan: uploadBatch}
				}},
			{name: "ai", count: 5, key: keyf("user:ai:%d"), policy: base,
				gen: func(int, *rand.Rand) generator {
					return &sessions{first: mn, gapMin: mn, gapMax: 3 * mn,
						plan: func(_ *rand.Rand, at int64) []req { return []req{{at, 25}} }}
				}},
		}
	},
}, beyondTake, leases, fleetScenario, llmGateway}

// Scenarios returns every scenario, in a fixed order.
func Scenarios() []Scenario { return append([]Scenario(nil), scenarios...) }

// lookup returns the scenario with the given name, or an error wrapping
// [ErrUnknownScenario].
func lookup(name string) (Scenario, error) {
	for _, s := range scenarios {
		if s.Name == name {
			return s, nil
		}
	}
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.Name
	}
	return Scenario{}, fmt.Errorf("%w: %q (have %v)", ErrUnknownScenario, name, names)
}
