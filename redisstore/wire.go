package redisstore

// WireVersion is the version of the wire contract this package speaks:
// the key layout, the stored values, and the script's arguments and
// replies, written down in WIRE.md beside the script. The script's header
// states the same number, and other runtimes that load the script (js/)
// check it. A change of the stored format or of a call's meaning after a
// release bumps it; WIRE.md says what a new version must do with values
// an older one wrote. Version 1 is the first released: the drafts before
// it were never released, and a key holding one of their values is
// corrupt.
const WireVersion = 1
