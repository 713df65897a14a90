// Package grpclimit rate-limits gRPC servers with ratebucket's token
// buckets: a unary and a stream server interceptor over any store.Store,
// in one process (memstore) or across a fleet (redisstore).
//
// It lives in a module of its own, so that users of the core library never
// download gRPC.
//
// # In a few lines
//
//	lim, err := grpclimit.New(grpclimit.Config{
//		Store:  rs,                                        // a redisstore: one limit for the fleet
//		Policy: algo.PerSecond(2).Burst(100),              // the default rule
//		Key:    grpclimit.IdentityOr(grpclimit.Peer),      // the caller, else its address
//		Methods: map[string]grpclimit.Rule{
//			"/shop.Orders/Create": {Cost: 10},             // draws 10 from the same bucket
//			"/auth.Login/*":       {Name: "login", Policy: algo.PerMinute(5).Burst(5), Fail: grpclimit.FailClosed},
//			"/grpc.health.v1.Health/*": {Exempt: true},
//		},
//	})
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(auth.Unary, lim.Unary()),   // auth first: it sets the identity
//		grpc.ChainStreamInterceptor(auth.Stream, lim.Stream()),
//	)
//
// # Who is limited
//
// A [KeyFunc] names the bucket of a call from its context, its full method
// name and its incoming metadata. [Identity] keys by the authenticated
// identity your authentication interceptor put in the context with
// [WithIdentity]; it never reads a client-supplied header, which anyone can
// forge. [Peer] keys by the transport peer's address, IPv6 grouped by /64
// (one host owns the whole network and can rotate through it). [IdentityOr]
// combines them: the default. Any function of the method and the metadata
// is a KeyFunc too; identities longer than 64 bytes or holding unusual bytes
// are hashed before they reach the store.
//
// A call's bucket key is the Config's Prefix (default "g:"), the rule's
// name, the key's class and its ID in braces, the Redis Cluster hash tag:
//
//	g:default:ip{192.0.2.7}
//	g:login:id{alice}
//	g:default:ip{2001:db8:1:2::/64}
//
// # What a client sees
//
// Every limited call gets the limit's state as response header metadata,
// the same fields httplimit sends as HTTP headers: x-ratelimit-limit
// (capacity), x-ratelimit-remaining (whole tokens left), x-ratelimit-reset
// (Unix seconds, rounded up, when the bucket is full again), and the IETF
// draft-10 ratelimit-policy ("name";q=capacity;w=fill seconds, or for a
// calendar quota the seconds of its period that holds the call) and ratelimit
// ("name";r=remaining;t=delay-seconds until full, rounded up). gRPC sends
// header metadata even with an error status, so a refused call carries them
// too, and retry-after (delay-seconds until the call could be admitted,
// rounded up, never 0), which only a refused call gets. The names are
// httplimit's HTTP headers and rls's in lower case, with the same meanings:
// internal/testdata/ratelimit-headers.json pins the values for all three.
//
// A refused call ends with codes.ResourceExhausted and a google.rpc.RetryInfo
// detail whose retry_delay is the exact wait (to the microsecond) after
// which the same call is admitted; gRPC clients and Envoy read it.
//
// # Streams
//
// A stream is charged once, when it opens, before the handler runs: a
// refused stream never reaches the handler. Messages on an admitted stream
// are not charged.
//
// # What New refuses
//
// A Config is checked once, by [New], so that no call fails for it: New
// returns an error wrapping [ErrInvalidConfig] and naming the rule
// (`Methods["/pkg.Service/Method"]`, or "the default rule") for a Methods
// key that is not "/pkg.Service/Method" or "/pkg.Service/*"; a Name that is
// not 1 to 32 bytes of [A-Za-z0-9_.-]; an invalid Policy (wrapping
// algo.ErrInvalidPolicy, or algo.ErrInvalidQuota for a quota); a negative
// Cost (algo.ErrInvalidCost) or one above the Policy's capacity
// (algo.ErrCostExceedsCapacity: such a call could never be admitted); a
// rule with a Policy of its own but no Name, or one Name given two
// policies (rules with one name share buckets); an unknown FailMode; an
// Exempt rule that also sets a Name, Policy, Cost, Key or Fail, which it
// would never use; and a Prefix over 64 bytes. A calendar quota
// (algo.Quota) is a rule's Policy like a bucket, since a call is a take,
// which a quota has; its ratelimit-policy w is the period that holds the
// call. The package's tests generate Configs and check, over real gRPC on
// memstore and on Redis, that a call under any Config New accepts is
// admitted or refused, never failed.
//
// # Failures and bad input
//
// What each outcome becomes:
//
//	admitted                        the handler runs; header metadata set
//	refused by the bucket           ResourceExhausted + RetryInfo; nothing charged
//	store failed (Redis down, ...)  the rule's FailMode: FailOpen runs the handler
//	                                unlimited (the default), FailClosed answers
//	                                Unavailable; never ResourceExhausted
//	call cancelled / past deadline  Canceled / DeadlineExceeded; nothing charged
//	no key (KeyFunc: ErrNoKey)      InvalidArgument: the client sent no identity
//	                                of the kind the rule needs
//	KeyFunc returned a gRPC status  that status, unchanged
//	bad input from the store        Internal, logged
//	other KeyFunc errors (ErrNoPeer) Internal, logged
//
// Bad input from the store (store.ErrKeyTooLong, store.ErrEmptyKey,
// algo.ErrInvalidPolicy, algo.ErrCostExceedsCapacity) is Internal, not
// InvalidArgument, because here the client chooses none of it: keys are
// built by the server (long identities are hashed, so no client can make a
// key too long), and policies and costs are the server's configuration,
// checked by [New]. Such an error is a deployment bug (a store configured
// with a smaller MaxKeyLen, say), so the server logs it and the client,
// which can do nothing about it, is told it is internal. A failure is
// logged at most once per second.
//
// # Metrics
//
// When some store of the process is observed (observe.Wrap, with
// contrib/prometheus or contrib/otel), each call's decision carries the
// gRPC full method as its route and the rule's Name as its policy, so
// ratebucket_decisions_total counts by method and rule. The methods are
// those of the server's registered services, a bounded set: grpc-go
// answers Unimplemented to any other before interceptors run, unless the
// server has an UnknownServiceHandler, whose calls name methods of the
// client's choosing. Do not observe the store of a limiter in front of
// one.
package grpclimit
