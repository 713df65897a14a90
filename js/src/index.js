// ratebucket for Node.js: token buckets in Redis shared with the Go
// package, through the same Lua script (redisstore/tokenbucket.lua, copied
// into this package by the prepack script) and the wire contract it
// implements (redisstore/WIRE.md). The front door is Limiter (limiter.js);
// RateBucket (ratebucket.js) is the call layer under it, one script call
// per operation; policy.js names policies as algo does.

export * from './ratebucket.js';
export { Policy, Rate, per, perSecond, perMinute, perHour, perDay } from './policy.js';
export { Limiter } from './limiter.js';
