-- tokenbucket.lua: the Lua twin of algo.TokenBucket.Take (algo/tokenbucket.go),
-- applied atomically to one or more buckets. Keep the two in step: the tests
-- in this package require identical Results, bit for bit.
--
-- Wire contract: version 1 (WIRE.md beside this file). Other runtimes (js/)
-- load this file by path and must agree with it: the keys, arguments,
-- replies and stored values below are the contract's, and changing their
-- meaning bumps the version (WIRE.md says how).
--
-- KEYS: the buckets' Redis keys.
-- ARGV[1] the call: clock then op, two letters, and an optional third.
--         Clock "s" = server clock (redis TIME), "c" = client clock. Op
--         "t" take, "m" multi (all admit and all are charged, or none is),
--         "i" inspect (cost 0, nothing is written). With a client clock a
--         denial or peek that refilled stores the refilled state and later
--         stamp, as algo returns it (in a denied multi only the denying
--         buckets do, as memstore); with the server clock only charges
--         write. A key that holds something that is not a bucket of this
--         clock is repaired: it is taken as an empty bucket stamped now
--         (deficit = capacity, so it denies until it refills: never more
--         tokens than it could have had), written so, and reported in the
--         reply; a third letter "k" keeps it instead and fails the call
--         with RBCORRUPT (inspect always does).
-- Client clock only: ARGV[2] now, µs since the Unix epoch; ARGV[3] TTL
--         margin in ms beyond the fill time (-1 = no expiry).
-- Then per key: capacity, unit, refill, cost (see algo.Policy). The common
-- call is thus: KEYS = {key}, ARGV = {"st", capacity, unit, refill, cost}.
--
-- Reply: {now, all admitted (0/1), then per key: admitted (0/1), remaining,
-- retry-after µs, reset-after µs}; op "i" appends the stored deficit, the
-- stored stamp and the key's PTTL; then, for each repaired key, its index
-- (1-based) and what it held (1 another type, 2 the other clock's format,
-- 3 a value that is not a bucket, 4 a bad or missing expiry). Integers
-- only: Redis truncates Lua floats.
--
-- Numbers are IEEE doubles, exact for integers up to 2^53. The bounds below
-- are algo's (Policy.Validate): full = capacity*unit <= 2^52, refill <= 2^52,
-- cost <= capacity, times < 2^53. With them every intermediate is at most
-- d + cost*unit <= 2*full <= 2^53 (algo/tokenbucket.go has the argument).
-- Division uses math.fmod, which is exact for doubles: a - fmod(a, b) is
-- an exact multiple of b and dividing it is exact. (math.floor(a/b) would
-- also be exact for the dividends here, all at most 2^52 or divided by
-- 1000: the rounded quotient k - r/b reaches k only if b*2^e >= 2^53 for
-- 2^e <= k, i.e. a >= 2^53 - b. fmod needs no such argument.)
--
-- State encoding (absent key = full bucket):
--   server clock: an integer string "<deficit><3 digits u>" (deficit*1000+u,
--     at most 19 digits, so Redis stores it int-encoded in the key's object)
--     with PEXPIREAT E, E = ceil(idle/1000) ms, idle = stamp + ceil(deficit/refill)
--     the time the bucket is full again. The stamp is not stored: it is
--     E*1000 - ceil(deficit/refill) - u, read back with PEXPIRETIME.
--   client clock: "<deficit>:<stamp>" with PEXPIRE of the time until idle
--     (in client time) plus the margin, or no expiry: Redis's own clock,
--     which runs the expiry, may run ahead of a mock client clock.

-- Speed: every call pays for the script's own work besides the Redis
-- commands it runs (TIME, GET, PEXPIRETIME, SET for a charge on the server
-- clock), and in Redis's Lua that work is mostly C calls (tonumber is
-- strtod, string.format is printf) and allocation (each local function
-- below is a closure built anew on every call). So the common call, a take
-- on one bucket with the server clock whose key is absent or holds digits,
-- runs first, before anything else is built: its arguments are checked with
-- plain comparisons, the state decoded with one tonumber, divisions done
-- with the % operator (exact here: see ceildiv below; every dividend on
-- this path is at most 2^52, the fill time's excepted, which uses fmod),
-- numbers written with '%d' (integer formatting, not printf's float code),
-- and no table is built but the reply. It is decide and store below,
-- inlined, and gives the same answers: the tests run both paths (a client
-- clock, an inspect or a multi take the general one). Anything it does not
-- handle (another call, bad arguments, a value that is not plain digits, a
-- missing expiry) falls through, having written nothing, to the general
-- path, which checks and reports everything. Measured with callgrind on
-- redis-server 7.0 (100k random keys, -P 16): 70k instructions per call,
-- against 93k when the common call went through the general functions.
local A, K = ARGV, KEYS
if A[1] == 'st' and #A == 5 and #K == 1 then
  local cap, unit, refill, cost = tonumber(A[2]), tonumber(A[3]), tonumber(A[4]), tonumber(A[5])
  if cap and unit and refill and cost and cap >= 1 and cap <= 1000000000000 and unit >= 1 and
    refill >= 1 and refill <= 4503599627370496 and cost >= 0 and cost <= cap and cap % 1 == 0 and
    unit % 1 == 0 and refill % 1 == 0 and cost % 1 == 0 and cap * unit <= 4503599627370496 then
    local call, key = redis.call, K[1]
    local v = redis.pcall('GET', key) -- an error reply (a table) falls through
    local d, t, u, r, q, ok = 0, 0, 0, 0, 0, true
    if v then
      local x = tonumber(v)
      ok = type(v) == 'string' and x and x < 1e14 and not string.find(v, '%D')
      if ok then
        u = x % 1000
        d = (x - u) / 1000
        local e = call('PEXPIRETIME', key)
        r = d % refill; q = (d - r) / refill; if r > 0 then q = q + 1 end
        t = e * 1000 - q - u
        ok = e >= 0 and t >= 0 and t <= 9007199254740991
      end
    end
    if ok then
      local tm = call('TIME')
      local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
      local full, need = cap * unit, cost * unit
      -- decide
      if d > full then d = full end
      if now > t then
        if d > 0 then
          r = d % refill; q = (d - r) / refill; if r > 0 then q = q + 1 end
          if now - t >= q then d = 0 else d = d - (now - t) * refill end
        end
        t = now
      end
      local admit, retry, reset = 0, 0, 0
      if d + need <= full then
        admit, d = 1, d + need
      else
        local a = d + need - full
        r = a % refill; q = (a - r) / refill; if r > 0 then q = q + 1 end
        retry = t - now + q
      end
      local idle = t -- when the bucket is full again
      if d > 0 then
        r = d % refill; q = (d - r) / refill; if r > 0 then q = q + 1 end
        idle = t + q
        reset = idle - now
      end
      local rem = full - d
      rem = (rem - rem % unit) / unit
      -- store (a charge only, as on the general path)
      if admit == 1 and cost > 0 then
        if idle <= now then
          if v then call('DEL', key) end
        else
          r = math.fmod(idle, 1000); local e = (idle - r) / 1000; if r > 0 then e = e + 1 end
          local format, val = string.format, d * 1000 + e * 1000 - idle
          if d < 9000000000000 then val = format('%d', val) else val = format('%.0f%03d', d, e * 1000 - idle) end
          call('SET', key, val, 'PXAT', format('%d', e))
        end
      end
      return {now, admit, admit, rem, retry, reset}
    end
  end
end

-- The general path.
local MAXLEVEL = 4503599627370496 -- 2^52
local MAXTIME = 9007199254740991 -- 2^53 - 1
local MAXCAP = 1000000000000
local fmod, floor, tonumber, format, call = math.fmod, math.floor, tonumber, string.format, redis.call

local function ceildiv(a, b) -- ceil(a/b), 0 <= a <= 2^53, b >= 1
  local r = fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end

local function floordiv(a, b) -- floor(a/b), 0 <= a <= 2^53, b >= 1
  return (a - fmod(a, b)) / b
end

local function arg(i, lo, hi)
  local x = tonumber(ARGV[i])
  if x == nil or x ~= floor(x) or x < lo or x > hi then
    error({err = 'RBARG argument ' .. i .. ' (' .. tostring(ARGV[i]) .. ') not an integer in [' ..
      string.format('%.0f', lo) .. ', ' .. string.format('%.0f', hi) .. ']'})
  end
  return x
end

local call1, n = tostring(ARGV[1]), #KEYS
local clock, op, keep = string.sub(call1, 1, 1), string.sub(call1, 2, 2), string.sub(call1, 3)
if keep ~= '' and keep ~= 'k' then error({err = 'RBARG bad call'}) end
keep = keep == 'k' or op == 'i'

-- corrupt reports a key that holds no bucket of this clock: with keep it
-- fails the call, else it returns the kind (see the reply) for load.
local function corrupt(key, kind, why)
  if keep then
    error({err = 'RBCORRUPT key ' .. key .. ' ' .. why .. ': not a ratebucket bucket; Reset (DEL) it'})
  end
  return kind
end
local now, margin
if clock == 's' then
  local tm = call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end

-- decide applies a request of cost to the bucket (d, t) at now, as
-- algo.TokenBucket.Take: it returns the new (d, t), admitted (0/1), the
-- remaining tokens, the retry-after and reset-after in µs.
local function decide(d, t, full, unit, refill, cost)
  -- 1. Time never runs backwards; 2. refill, forming (now-t)*refill only
  -- when it is below d + refill.
  if d > full then d = full end
  if now > t then
    if d > 0 then
      if now - t >= ceildiv(d, refill) then d = 0 else d = d - (now - t) * refill end
    end
    t = now
  end
  -- 3. Admit and charge, or 4. deny with the exact wait.
  local need = cost * unit
  local ok, retry = 0, 0
  if d + need <= full then
    ok, d = 1, d + need
  else
    retry = t - now + ceildiv(d + need - full, refill)
  end
  local reset = 0
  if d > 0 then reset = t - now + ceildiv(d, refill) end
  return d, t, ok, floordiv(full - d, unit), retry, reset
end

-- store writes the bucket's new state (d, t) at time now.
local function store(key, d, t, exists, refill)
  local idle = t + ceildiv(d, refill) -- when the bucket is full again
  if idle <= now then
    if exists then call('DEL', key) end
  elseif clock == 's' then
    local e = ceildiv(idle, 1000)
    local u = e * 1000 - idle
    local v
    if d > 0 then v = format('%.0f%03d', d, u) else v = format('%d', u) end
    call('SET', key, v, 'PXAT', format('%.0f', e))
  else
    local v = format('%.0f:%.0f', d, t)
    if margin < 0 then
      call('SET', key, v)
    else
      call('SET', key, v, 'PX', format('%.0f', ceildiv(idle - now, 1000) + margin))
    end
  end
end

if (clock ~= 's' and clock ~= 'c') or (op ~= 't' and op ~= 'm' and op ~= 'i') then
  error({err = 'RBARG bad clock or op'})
end
local base = 1 -- the arguments before the first key's four
if clock == 'c' then base = 3 end
if n < 1 or #ARGV ~= base + 4 * n then
  error({err = 'RBARG want 4 arguments per key'})
end
if op ~= 'm' and n ~= 1 then
  error({err = 'RBARG take and inspect are for one key'})
end
if clock ~= 's' then
  now = arg(2, 0, MAXTIME)
  margin = arg(3, -1, MAXTIME)
end

-- decode returns the stored deficit and stamp of key (0, 0 when absent)
-- and whether it exists; for a key that holds no bucket of this clock it
-- returns nil, nil, true and the kind (or fails the call: see corrupt).
local function decode(key, refill)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return nil, nil, true, corrupt(key, 1, 'holds a ' .. redis.call('TYPE', key)['ok'])
  end
  if not v then return 0, 0, false end
  if string.find(v, ':', 1, true) then
    if clock ~= 'c' then return nil, nil, true, corrupt(key, 2, 'was written with a client clock') end
    local d, t = string.match(v, '^(%d+):(%d+)$')
    d, t = tonumber(d), tonumber(t)
    if d == nil or t == nil or d > MAXLEVEL or t > MAXTIME then return nil, nil, true, corrupt(key, 3, 'holds ' .. v) end
    return d, t, true
  end
  if clock ~= 's' then return nil, nil, true, corrupt(key, 2, 'was written with the server clock') end
  local d, u
  local x = tonumber(v)
  if x and x >= 0 and x < 1e14 and x == floor(x) and tostring(x) == v then -- canonical digits
    u = fmod(x, 1000)
    d = (x - u) / 1000
  else
    if not string.match(v, '^%d+$') or #v > 19 then return nil, nil, true, corrupt(key, 3, 'holds ' .. v) end
    d, u = 0, tonumber(v)
    if #v > 3 then
      d, u = tonumber(string.sub(v, 1, -4)), tonumber(string.sub(v, -3))
    end
  end
  local e = call('PEXPIRETIME', key)
  if d > MAXLEVEL then return nil, nil, true, corrupt(key, 3, 'holds ' .. v) end
  if e < 0 then return nil, nil, true, corrupt(key, 4, 'holds ' .. v .. ' with expiry ' .. e) end
  local t = e * 1000 - ceildiv(d, refill) - u
  if t < 0 or t > MAXTIME then return nil, nil, true, corrupt(key, 4, 'holds ' .. v .. ' with expiry ' .. e) end
  return d, t, true
end

local reply = {now, 1}
local pend = {}
local repaired = {} -- index, kind of each repaired key
for i = 1, n do
  local b = base + 4 * (i - 1)
  local cap = arg(b + 1, 1, MAXCAP)
  local unit = arg(b + 2, 1, MAXLEVEL)
  local refill = arg(b + 3, 1, MAXLEVEL)
  local cost = arg(b + 4, 0, cap)
  local full = cap * unit
  if full > MAXLEVEL then error({err = 'RBARG capacity*unit above 2^52'}) end
  if op == 'i' and cost ~= 0 then error({err = 'RBARG inspect takes cost 0'}) end

  local d0, t0, exists, kind = decode(KEYS[i], refill)
  if kind then -- repair: an empty bucket stamped now
    d0, t0 = full, now
    repaired[#repaired + 1], repaired[#repaired + 2] = i, kind
  end
  local d, t, ok, rem, retry, reset = decide(d0, t0, full, unit, refill, cost)
  if ok == 0 then reply[2] = 0 end
  local at = #reply
  reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = ok, rem, retry, reset
  local changed = d ~= d0 or t ~= t0
  if op == 'i' then
    reply[at + 5], reply[at + 6], reply[at + 7] = d0, t0, call('PTTL', KEYS[i])
  elseif op == 't' then
    -- A take decides each bucket alone. With the server clock only a
    -- charge writes: a denial or peek that merely refilled changes nothing
    -- a later call on the same clock can see (it computes the same refill
    -- from the older state), so it saves the write and its replication.
    if (clock == 's' and ok == 1 and cost > 0) or (clock ~= 's' and changed) or kind then
      store(KEYS[i], d, t, exists, refill)
    end
  else
    pend[i] = {d = d, t = t, changed = changed, exists = exists, refill = refill, ok = ok, cost = cost, kind = kind}
  end
end

-- append adds the repaired keys to the reply and returns it.
local function append()
  for j = 1, #repaired do reply[#reply + 1] = repaired[j] end
  return reply
end

if op ~= 'm' then return append() end

for i = 1, n do
  local p = pend[i]
  -- A denied multi leaves the buckets that would have admitted alone as
  -- they were (not charged, not refilled); with the server clock only
  -- charges write, as for a take.
  local write = p.changed and not (reply[2] == 0 and p.ok == 1)
  if clock == 's' then write = p.ok == 1 and p.cost > 0 and reply[2] == 1 end
  if write or p.kind then store(KEYS[i], p.d, p.t, p.exists, p.refill) end
end
return append()
