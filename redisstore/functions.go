package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
)

// functionName is the name of the Function library that holds the script,
// and of its one function: the wire version and the first 12 hex digits of
// the script's SHA1, so that two builds of a fleet never call each other's
// text (as EVALSHA names a script by its SHA1) and a library of another
// wire version is never called.
var functionName = fmt.Sprintf("ratebucket_v%d_%s", WireVersion, script.Hash()[:12])

// functionCode is the library: the script's text, unchanged, as the body of
// the function's callback. Its KEYS and ARGV are the callback's arguments,
// and its top-level locals and returns are the body's, so the one file
// serves EVALSHA and FCALL alike (WIRE.md gives the wrapping byte for byte).
var functionCode = "#!lua name=" + functionName + "\n" +
	"redis.register_function{function_name='" + functionName + "', callback=function(KEYS, ARGV)\n" +
	scriptSrc + "\nend}\n"

// FunctionLibrary returns the name and the code of the Redis Function
// library that [Config.Functions] loads: for tools that load it ahead of
// time (FUNCTION LOAD REPLACE) or measure it, such as redis-benchmark
// running one Take of cost 1 on a bucket of 100 refilled 2 per second:
//
//	redis-benchmark FCALL <name> 2 rb:k pol:rb: 100:500000:1
//
// The function takes the script's KEYS and ARGV (see WIRE.md).
func FunctionLibrary() (name, code string) { return functionName, functionCode }

// functions delivers the script as a Function library and calls it with
// FCALL (Config.Functions); a nil *functions is the default delivery,
// EVALSHA with EVAL on NOSCRIPT. Its methods serve both, so the callers
// (run, and the pipeline's flush) need not tell them apart.
type functions struct {
	rdb   redis.UniversalClient
	name  any // functionName, boxed once
	group singleflight.Group
	loads atomic.Int64 // libraries loaded, for tests
}

func newFunctions(rdb redis.UniversalClient) *functions {
	return &functions{rdb: rdb, name: functionName}
}

// head returns the first two words of a script call: EVALSHA and the SHA1,
// or FCALL and the function's name.
func (f *functions) head() (verb, target any) {
	if f == nil {
		return "evalsha", argSHA
	}
	return "fcall", f.name
}

// functionMissing reports whether err is Redis saying the function does not
// exist: a server that was flushed or never had the library. The call did
// not run.
func functionMissing(err error) bool {
	// A reply that is not an error is no Redis error: checking only
	// errors spares HasErrorPrefix's allocation on every reply.
	return err != nil && redis.HasErrorPrefix(err, "Function not found") // go-redis drops "ERR "
}

// noScript reports whether err is Redis saying it does not hold the script
// (NOSCRIPT): the call did not run.
func noScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// again reports whether the call of cmd, which Redis answered without
// running the script, is to be sent again, after rewriting args: NOSCRIPT
// becomes EVAL of the source; a missing function is sent as it was once
// the library is loaded (loadErr nil), else cmd fails with loadErr.
func (f *functions) again(cmd *redis.StringCmd, args []any, loadErr error) bool {
	switch err := cmd.Err(); {
	case err == nil:
		return false
	case noScript(err):
		args[0], args[1] = "eval", evalSource(args[1])
		return true
	case !functionMissing(err):
		return false
	case loadErr != nil:
		cmd.SetErr(fmt.Errorf("redisstore: FUNCTION LOAD %s failed (the call did not run): %w", functionName, loadErr))
		return false
	}
	return true
}

// retry is again for one call: it loads the library first if Redis said it
// was missing.
func (f *functions) retry(ctx context.Context, cmd *redis.StringCmd, args []any) bool {
	var loadErr error
	if functionMissing(cmd.Err()) {
		loadErr = f.load(ctx)
	}
	return f.again(cmd, args, loadErr)
}

// pick is again for the calls of a pipeline, loading the library once for
// all of them; it returns nil when none is to be sent again.
func (f *functions) pick(ctx context.Context, calls []*call) func(*call) bool {
	var again, missing bool
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil {
			again = again || noScript(err)
			missing = missing || functionMissing(err)
		}
	}
	if !again && !missing {
		return nil
	}
	var loadErr error
	if missing {
		loadErr = f.load(ctx)
	}
	return func(c *call) bool { return f.again(c.cmd, c.args, loadErr) }
}

// load loads the library with FUNCTION LOAD REPLACE on every master (every
// shard of a Ring); callers that find it missing at once share one load.
// REPLACE makes it idempotent: a server that has it keeps the same code.
func (f *functions) load(ctx context.Context) error {
	if f == nil {
		return fmt.Errorf("redisstore: no function library in use")
	}
	_, err, _ := f.group.Do("", func() (any, error) {
		one := func(ctx context.Context, c *redis.Client) error {
			return c.FunctionLoadReplace(ctx, functionCode).Err()
		}
		var err error
		switch c := f.rdb.(type) {
		case *redis.ClusterClient:
			err = c.ForEachMaster(ctx, one)
		case *redis.Ring:
			err = c.ForEachShard(ctx, one)
		default:
			err = f.rdb.FunctionLoadReplace(ctx, functionCode).Err()
		}
		if err == nil {
			f.loads.Add(1)
		}
		return nil, err
	})
	return err
}
