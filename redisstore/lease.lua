-- lease.lua: the Lua twin of algo's lease functions (AcquireLease,
-- ReleaseLease and RenewLease in algo/lease.go), applied atomically to one
-- key's leases. Keep the two in step: storetest's Leases model requires the
-- answers of algo and of this script to be identical, call for call.
--
-- Wire contract: version 1 (WIRE.md beside this file, section "Leases").
-- This is a script of its own, apart from tokenbucket.lua: a lease call
-- never runs the bucket script's code, and the bucket script is unchanged.
--
-- KEYS[1]: the lease set's key (under its own prefix: bucket keys and lease
--          keys never meet).
-- ARGV[1] the call: clock then op, two letters, and an optional third.
--         Clock "s" = server clock (redis TIME), "c" = client clock. Op
--         "a" acquire, "r" release, "n" renew. A key that holds something
--         that is not a lease set is repaired (taken as an empty set: see
--         below) and reported in the reply; a third letter "k" keeps it
--         instead and fails the call with RBCORRUPT, changing nothing.
-- Client clock only: ARGV[2] now, µs since the Unix epoch; ARGV[3] TTL
--         margin in ms beyond the last lease's expiry (-1 = no expiry).
-- Then: acquire: limit, ttl (µs), id; renew: ttl, id; release: id.
--
-- Reply: {now, ok (0/1), remaining, retry-after µs, repaired}. ok is
-- "admitted" for an acquire, "it was live" for a release or a renewal;
-- remaining and retry-after are an acquire's (algo.LeaseResult), 0 for the
-- others; repaired is 0, or what a repaired key held: 1 another Redis type,
-- 3 a lease set with a score above 2^53 - 1. Integers only.
--
-- State: a sorted set, member = lease id, score = the lease's expiry in µs
-- (algo.Lease; Redis orders members of equal score byte-wise, as
-- algo.Leases is ordered). An absent key holds no leases. After a write the
-- key expires with its last lease: server clock PEXPIREAT ceil(max/1000)
-- ms; client clock PEXPIRE ceil((max - now)/1000) + margin ms (Redis runs
-- expiry on its own clock, which may run ahead of a mock client clock), or
-- no expiry with margin -1. So an idle key holds no memory.
--
-- Numbers are IEEE doubles, exact for integers up to 2^53. The bounds are
-- algo's: limit <= 2^16, ttl <= 86400 s = 8.64e10 µs, now <= 2^53-1 - ttl,
-- so now + ttl <= 2^53-1; a stored score above 2^53-1 is corruption (kind
-- 3), so every score read is below 2^53 too; the margin is at most 10^13
-- ms, so ceil((max-now)/1000) + margin < 9.1e12 + 1e13 < 2^53. A score
-- that is not a whole number (never written here) counts as the next whole
-- µs, which is when step 1 below drops it.

local MAXTIME = 9007199254740991 -- 2^53 - 1, algo.MaxTime
local MAXLIMIT = 65536           -- algo.MaxLeaseLimit
local MAXTTL = 86400000000       -- algo.MaxLeaseTTL in µs
local MAXID = 64                 -- algo.MaxLeaseIDLen
local MAXMARGIN = 10000000000000 -- ms
local call, format, floor, ceil, fmod = redis.call, string.format, math.floor, math.ceil, math.fmod
local key = KEYS[1]

local function arg(i, lo, hi)
  local x = tonumber(ARGV[i])
  if x == nil or x ~= floor(x) or x < lo or x > hi then
    error({err = 'RBARG argument ' .. i .. ' (' .. tostring(ARGV[i]) .. ') not an integer in [' ..
      format('%.0f', lo) .. ', ' .. format('%.0f', hi) .. ']'})
  end
  return x
end

local c = tostring(ARGV[1])
local clock, op, keep = string.sub(c, 1, 1), string.sub(c, 2, 2), string.sub(c, 3)
local nargs = ({a = 3, n = 2, r = 1})[op]
if #KEYS ~= 1 or (clock ~= 's' and clock ~= 'c') or nargs == nil or (keep ~= '' and keep ~= 'k') then
  error({err = 'RBARG bad call'})
end
local base = 1 -- the arguments before the op's own
if clock == 'c' then base = 3 end
if #ARGV ~= base + nargs then error({err = 'RBARG want ' .. (base + nargs) .. ' arguments'}) end
local limit, ttl = 0, 0
if op == 'a' then limit = arg(base + 1, 1, MAXLIMIT) end
if op ~= 'r' then ttl = arg(#ARGV - 1, 1, MAXTTL) end
local id = ARGV[#ARGV]
if #id < 1 or #id > MAXID then error({err = 'RBARG lease id of ' .. #id .. ' bytes'}) end
local now, margin
if clock == 's' then
  local tm = call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  if now > MAXTIME - ttl then error({err = 'RBARG server clock beyond 2^53 µs'}) end
else
  now = arg(2, 0, MAXTIME - ttl)
  margin = arg(3, -1, MAXMARGIN)
end

local function ceildiv(a, b) -- ceil(a/b), 0 <= a <= 2^53, b >= 1, exact
  local r = fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end

-- expire sets the key's expiry from hi, its highest score (> now).
local function expire(hi)
  if clock == 's' then
    call('PEXPIREAT', key, format('%.0f', ceildiv(hi, 1000)))
  elseif margin < 0 then
    call('PERSIST', key)
  else
    call('PEXPIRE', key, format('%.0f', ceildiv(hi - now, 1000) + margin))
  end
end

-- highest returns the key's highest score, rounded up to a whole µs, or
-- nil when the key holds no lease.
local function highest()
  local top = call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[2] then return ceil(tonumber(top[2])) end
  return nil
end

-- Check, before anything is written: the key is absent or a sorted set
-- whose highest score is at most 2^53-1 (so are all the others).
local kind, hi = 0, nil
local top = redis.pcall('ZRANGE', key, -1, -1, 'WITHSCORES')
if top.err then
  kind = 1
elseif top[2] then
  hi = tonumber(top[2])
  if hi == nil or not (hi <= MAXTIME) then
    kind = 3
  else
    hi = ceil(hi)
  end
end
if kind ~= 0 then
  if keep == 'k' then
    local held = 'a sorted set with a score above 2^53-1'
    if kind == 1 then held = 'a ' .. call('TYPE', key)['ok'] end
    error({err = 'RBCORRUPT key ' .. key .. ' holds ' .. held .. ': not a ratebucket lease set; delete it'})
  end
  -- Repair: whatever the key held is no lease of ours (this script only
  -- writes sorted sets of scores within bounds), so the set is empty.
  call('DEL', key)
  hi = nil
end

-- 1. Drop the expired leases: those with expiry <= now.
if hi then
  if hi <= now then
    call('DEL', key) -- every lease expired
    hi = nil
  else
    call('ZREMRANGEBYSCORE', key, '-inf', format('%.0f', now))
  end
end

-- held is the expiry of id's live lease (after step 1 every lease left is
-- live), or nil.
local held = nil
if hi then
  local v = call('ZSCORE', key, id)
  if v then held = ceil(tonumber(v)) end
end
local exp = now + ttl
local ok, rem, retry = 0, 0, 0

-- after a write that left id's lease at expiry e (nil: removed), sets the
-- key's expiry from its highest score: e or the old highest when id's
-- lease did not hold the highest before, else read anew.
local function after(e)
  local newhi
  if held == nil or held < hi then
    if e == nil then return end -- a release below the highest: unchanged
    newhi = e
    if hi and hi > e then newhi = hi end
  else
    newhi = highest()
  end
  if newhi then expire(newhi) end
end

if op == 'r' then
  if held then
    call('ZREM', key, id)
    ok = 1
    after(nil)
  end
elseif op == 'n' then
  if held then
    call('ZADD', key, format('%.0f', exp), id)
    ok = 1
    after(exp)
  end
else
  local n = 0
  if hi then n = call('ZCARD', key) end
  if held then
    -- 2. id holds a live lease: renew it, taking no other slot.
    call('ZADD', key, format('%.0f', exp), id)
    ok = 1
    after(exp)
  elseif n < limit then
    -- 3. Fewer than limit leases: add one.
    call('ZADD', key, format('%.0f', exp), id)
    ok, n = 1, n + 1
    after(exp)
  else
    -- 4. Denied: a slot frees when the lease at rank n - limit expires.
    local e = call('ZRANGE', key, n - limit, n - limit, 'WITHSCORES')
    retry = ceil(tonumber(e[2])) - now
  end
  if n < limit then rem = limit - n end
end
return struct.pack('>i8i8i8i8i8', now, ok, rem, retry, kind) -- packed, as tokenbucket.lua's
