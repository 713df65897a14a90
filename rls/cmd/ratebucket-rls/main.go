// Command ratebucket-rls is a rate-limit server speaking Envoy's
// envoy.service.ratelimit.v3.RateLimitService: point Envoy's ratelimit
// filter (or any client of that API) at it, with a configuration in
// envoyproxy/ratelimit's YAML format, and it answers with exact token
// buckets kept in Redis, Redis Cluster or, for a single node, memory.
//
//	ratebucket-rls -config /etc/ratelimit/config -redis redis://127.0.0.1:6379
//
// Flags (each may also be set by the environment variable in brackets):
//
//	-config PATH        a YAML file, or a directory of them [RLS_CONFIG]
//	-grpc ADDR          gRPC listen address, default :8081 [RLS_GRPC_ADDR]
//	-http ADDR          /healthz, /readyz, /metrics; default :8080 [RLS_HTTP_ADDR]
//	-redis URL          a Redis server, redis://host:port/db or host:port [REDIS_URL]
//	-redis-cluster A,B  Redis Cluster seed nodes, host:port,... [REDIS_CLUSTER_ADDRS]
//	                    with neither, buckets live in this process's memory
//	-redis-prefix P     Redis key prefix, default "rb:"
//	-no-pipeline        turn off redisstore's auto-pipelining
//	-hash-tag T         first (default), descriptor or domain: see package rls
//	-response-headers   add x-ratelimit-*, ratelimit, retry-after headers [LIMIT_RESPONSE_HEADERS_ENABLED=true]
//	-shutdown-timeout D how long in-flight calls may take at SIGTERM, default 10s
//
// The configuration is reloaded when its files change and on SIGHUP; a
// file that does not load is logged and the previous configuration stays.
// SIGTERM or SIGINT stops accepting, finishes in-flight calls, closes the
// store and exits.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	if err := run(ctx, os.Args[1:], os.Getenv, hup, nil); err != nil {
		fmt.Fprintln(os.Stderr, "ratebucket-rls:", err)
		os.Exit(1)
	}
}
