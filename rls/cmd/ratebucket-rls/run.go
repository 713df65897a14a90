package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/rls"
	"github.com/ratebucket/ratebucket/store"
)

// listening, if set, is told the bound addresses (tests listen on :0).
type listening func(grpcAddr, httpAddr string)

// run parses args, starts the server and serves until ctx ends. hup
// triggers a reload.
func run(ctx context.Context, args []string, getenv func(string) string, hup <-chan os.Signal, ready listening) error {
	fs := flag.NewFlagSet("ratebucket-rls", flag.ContinueOnError)
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var (
		config       = fs.String("config", env("RLS_CONFIG", ""), "configuration: a YAML file or a directory of them")
		grpcAddr     = fs.String("grpc", env("RLS_GRPC_ADDR", ":8081"), "gRPC listen address")
		httpAddr     = fs.String("http", env("RLS_HTTP_ADDR", ":8080"), "HTTP listen address (/healthz, /readyz, /metrics); empty: none")
		redisURL     = fs.String("redis", env("REDIS_URL", ""), "Redis server: redis://host:port/db or host:port")
		clusterAddrs = fs.String("redis-cluster", env("REDIS_CLUSTER_ADDRS", ""), "Redis Cluster seed nodes: host:port,host:port")
		prefix       = fs.String("redis-prefix", redisstore.DefaultPrefix, "Redis key prefix")
		noPipeline   = fs.Bool("no-pipeline", false, "turn off auto-pipelining of Redis calls")
		hashTag      = fs.String("hash-tag", "first", "Cluster hash tag of bucket keys: first, descriptor or domain")
		headers      = fs.Bool("response-headers", env("LIMIT_RESPONSE_HEADERS_ENABLED", "") == "true", "add x-ratelimit-*, ratelimit and retry-after response headers")
		shutdown     = fs.Duration("shutdown-timeout", 10*time.Second, "how long in-flight calls may take at shutdown")
		leaseN       = fs.Int("lease-instances", 0, "servers sharing Redis, for lease: true descriptors (leased batches); 0: no leases")
		leaseL       = fs.Duration("lease-lifetime", 0, "how long a leased batch may be spent (0: hybrid.DefaultLifetime, 100ms)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *config == "" {
		return errors.New("-config is required")
	}
	tag, ok := rls.ParseHashTag(*hashTag)
	if !ok {
		return fmt.Errorf("-hash-tag %q: want first, descriptor or domain", *hashTag)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := rls.NewMetrics(reg)
	if err != nil {
		return err
	}
	loader, err := rls.NewLoader(*config, metrics, logger)
	if err != nil {
		return err
	}

	st, ping, closeStore, cluster, err := openStore(*redisURL, *clusterAddrs, *prefix, *noPipeline)
	if err != nil {
		return err
	}
	defer closeStore()
	if ping == nil {
		logger.Info("rls: no Redis given; buckets live in this process (a single node)")
	}

	var leases *hybrid.LeasesConfig
	if *leaseN != 0 || *leaseL != 0 {
		leases = &hybrid.LeasesConfig{Instances: *leaseN, Lifetime: *leaseL}
	}
	svc, err := rls.NewService(loader, rls.Options{Store: st, Cluster: cluster, HashTag: tag,
		ResponseHeaders: *headers, Metrics: metrics, Logger: logger, Leases: leases})
	if err != nil {
		return err
	}
	defer svc.Close() // before closeStore: it gives the batches back

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed, err := loader.WatchFiles(wctx, 200*time.Millisecond)
	if err != nil {
		return fmt.Errorf("watching %s: %w", *config, err)
	}
	trigger := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-wctx.Done():
				return
			case <-changed:
			case <-hup:
			}
			select {
			case trigger <- struct{}{}:
			default:
			}
		}
	}()
	go loader.Watch(wctx, trigger)

	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return err
	}
	var hl net.Listener
	if *httpAddr != "" {
		if hl, err = net.Listen("tcp", *httpAddr); err != nil {
			gl.Close()
			return err
		}
	}
	httpBound := ""
	if hl != nil {
		httpBound = hl.Addr().String()
	}
	logger.Info("rls: serving", "grpc", gl.Addr().String(), "http", httpBound, "domains", loader.Config().Domains())
	if ready != nil {
		ready(gl.Addr().String(), httpBound)
	}
	srv := &rls.Server{Service: svc, Ready: ping, Gatherer: reg, ShutdownTimeout: *shutdown, Logger: logger}
	return srv.Serve(ctx, gl, hl)
}

// openStore opens the store the flags name: a redisstore on a server or
// a cluster, else a memstore. ping checks Redis for readiness (nil for a
// memstore); closeStore closes the store, then the client.
func openStore(url, clusterAddrs, prefix string, noPipeline bool) (st store.Store, ping func(context.Context) error, closeStore func(), cluster bool, err error) {
	var client redis.UniversalClient
	switch {
	case clusterAddrs != "":
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(clusterAddrs, ","), ContextTimeoutEnabled: true})
		cluster = true
	case url != "":
		opt, perr := redis.ParseURL(url)
		if perr != nil {
			if strings.Contains(url, "://") {
				return nil, nil, nil, false, fmt.Errorf("-redis %q: %w", url, perr)
			}
			opt = &redis.Options{Addr: url}
		}
		opt.ContextTimeoutEnabled = true
		client = redis.NewClient(opt)
	default:
		ms, merr := memstore.New(memstore.Config{})
		if merr != nil {
			return nil, nil, nil, false, merr
		}
		return ms, nil, func() { ms.Close() }, false, nil
	}
	rs, err := redisstore.New(client, redisstore.Config{Prefix: prefix, Pipeline: redisstore.PipelineConfig{Disabled: noPipeline}})
	if err != nil {
		client.Close()
		return nil, nil, nil, false, err
	}
	ping = func(ctx context.Context) error { return client.Ping(ctx).Err() }
	return rs, ping, func() { rs.Close(); client.Close() }, cluster, nil
}
