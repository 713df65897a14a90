// Package sim is a deterministic simulator of rate-limited traffic: it
// shows why the token bucket wins, and proves that ratebucket's backends
// agree and never over-admit.
//
// A run sends a [Scenario]'s clients through N app instances, each with
// its own ratebucket.Limiter, over a real store (memstore, or any store.Store
// that [Config.Stores] builds, such as redisstore on a real Redis), under
// any algo.Algorithm, and reports what every class of client got. [Run]
// makes one run per algorithm and store layout of its [Config]:
//
//	reps, err := sim.Run(ctx, sim.Config{Scenario: "mobile", Instances: 3,
//		Algorithms: []algo.Algorithm{algo.TokenBucket{}, algo.FixedWindow{}}})
//	fmt.Print(reps.Table())       // compare the runs in 80 columns
//	fmt.Print(reps[1].Markdown()) // the fixed window's run in detail
//	reps[1].Timeline.WriteSVG(f)  // a chart a reader can open
//
// # Virtual time
//
// Each run owns a virtual clock, a store.Clock the stores read, which
// starts at midnight UTC on 1 January 2030 (a fixed start keeps window
// boundaries in place) and jumps from event to event: it never sleeps and
// never reads the real clock, so a simulated hour of thousands of clients
// takes seconds. Events are kept in
// a heap ordered by (time, sequence), all randomness comes from PCG
// streams seeded by [Config.Seed] and each client's identity, and every
// draw is an integer: the same Config gives the same Report, tables and SVG
// bytes, bit for bit, on any platform.
//
// # Scenarios
//
// The traffic comes from the article this library answers ([Scenarios]
// lists them): a phone loading its feed in a burst of 12 and refreshing 3
// times in a minute while a laptop on the same IP loads 64 pages' worth
// ("mobile"); an attacker who reads the reset time and spends a full limit
// on each side of a window boundary ("boundary-spike"); steady sensors
// ("sensor"); a client at 18,000 requests a minute ("abuser"); a campus
// NAT of anonymous, signed-in and paid users keyed by IP ("campus-nat-ip")
// or by user if known, else IP ("campus-nat-user"); and cheap reads mixed
// with expensive uploads and AI calls ("cost"). Two are about scale: one
// global key at 10,000 a second asked for 12,000 through every instance
// ("leases"), and a fleet over a 6-shard Redis Cluster, the global key and
// 10,000 users each on their own key ("fleet"), whose keys go to shards by
// their Cluster slot, with the calls counted per shard
// ([Report.ShardCalls]).
//
// One more shows what the operations around a take buy ("beyond-take"),
// each beside a class sending the same traffic with plain Takes: uploads
// whose failures are refunded, as httplimit's ChargeIf does; bursts held
// for their exact delay by a reservation instead of refused, as its Delay
// does; and slow reports held to 2 in flight by leases, as its
// Concurrency does. The law is checked on what stays charged, at the time
// it proceeds. Under the windows, which can neither refund nor reserve,
// each pair's rows are the same.
//
// And "llm-gateway" limits LLM calls by their tokens, a heavy-tailed cost
// known only after the call: charged an estimate, held at the estimate and
// settled at the tokens used (store.Store's Hold and Settle), or held at 0
// and charged after. Its law is algo.Policy.SettleBound: the report shows
// one fill time of slack.
//
// # Topologies and clocks
//
// [Shared] gives every instance the same store: what Redis gives a fleet.
// [PerInstance] gives each its own, the broken setup in which three
// instances admit about three times the limit. [Config.Skew] offsets each
// instance's clock. Skew is modelled where it is real: a shared store
// whose requests carry the caller's time, which is redisstore with its
// client clock (on Redis, one redisstore.Store per instance from
// [Config.Stores], each with its own skewed clock; over memstore, one
// store that reads the calling instance's clock). Redis's server clock
// cannot be simulated, since it is real time, but it is what a shared
// store with no skew models: one clock for the fleet. [Leased] is Shared
// with token leases (hybrid.Leases) in each instance: the law is then
// checked against algo's BatchBound, and the tables count the calls saved.
//
// # What is measured
//
// Per run and per class ([Stats]): requests, admitted and denied; the
// false-429 rate, the share of legitimate clients' requests that were
// denied, where legitimate means the client asked for no more than its
// policy's long-run rate allows over the run (bursts included); the most
// admitted at one key in any window of 1 s, 10 s and 60 s against the bound
// capacity + rate·w ([Window], an exact sliding maximum); the calls that
// reached the backend ([Report.BackendCalls]); and the never-exceed law
// over every interval ([Law], checked in time linear in the admissions),
// which holds for a token bucket on a shared store and is found broken,
// automatically, for a fixed window and for per-instance stores.
//
// # Pictures
//
// Each Report carries a [Timeline] of the scenario's focus key: every
// request there with its answer, the room left in the bucket as exact
// piecewise-linear [Level] points (the token bucket's sawtooth, a window's
// count resetting at its boundaries), the windows, the law's worst
// interval and a span to zoom on. [Timeline.WriteSVG] draws it as a
// static chart, and `ratebucket play` serves it to a browser page; neither
// computes anything the Timeline does not hold. [Config.Traffic] runs
// traffic drawn by hand, one [Pattern] per client, instead of a named
// scenario.
package sim
