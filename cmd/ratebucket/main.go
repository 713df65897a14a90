// Command ratebucket is the first thing to run in this repository: it
// serves the playground (the simulator in a browser page), prints the
// simulator's comparison of rate-limiting algorithms, runs a live
// demo of the HTTP middleware with its own load generator, inspects and
// resets buckets kept in Redis, and measures a store's throughput.
//
// Usage:
//
//	ratebucket play     [--port 8016]
//	ratebucket sim      [--scenario NAME|all] [--algo ...] [--instances N] [--seed S] [--svg DIR] [--json]
//	ratebucket demo     [--redis URL] [--instances N] [-n 1000] [-c 200] [--capacity 100] [--rate 2] [--serve]
//	                    [--timeout 1s] [--fail open|closed]
//	ratebucket inspect  --redis URL --capacity N --rate R KEY...
//	ratebucket reset    --redis URL KEY...
//	ratebucket bench    [--redis URL] [--duration D] [--concurrency 1,16,64]
//
// Every subcommand takes --help. Without --redis everything runs in one
// process on memstore, so
//
//	go run ./cmd/ratebucket play
//
// needs nothing but Go (and a browser to open the URL it prints). Exit
// status is 0 on success, 2 for a usage error (bad flag or argument) and 1
// when the work itself failed (for example an unreachable Redis); the
// reason is one line on stderr.
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
