package redisstore

// WireVersion is the version of the wire contract this package speaks:
// the key layout, the stored values, and the script's arguments and
// replies, written down in WIRE.md beside the script. The script's header
// states the same number, and other runtimes that load the script (js/)
// check it. A change of the stored format or of a call's meaning bumps
// it; WIRE.md says what a new version must do with values an older one
// wrote. Version 2 added refunds, partial grants and reservations, and
// marks a bucket in debt so that a version 1 script reports it as corrupt
// instead of reading it as an empty bucket. Version 3 records which policy
// wrote each bucket (a policy registry per slot, and the policy's number
// in the value), so a bucket whose policy changes is converted exactly
// (algo.TokenBucket.Rebase), in values a version 2 script finds corrupt.
const WireVersion = 3
