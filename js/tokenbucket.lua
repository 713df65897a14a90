-- tokenbucket.lua: the Lua twin of algo.TokenBucket (algo/tokenbucket.go and
-- algo/ops.go: Take, Refund, TakeAtMost, Reserve, Cancel), applied
-- atomically to one or more buckets. Keep the two in step: the tests in this
-- package require identical Results, bit for bit.
--
-- Wire contract: version 3 (WIRE.md beside this file). Other runtimes (js/)
-- load this file by path and must agree with it: the keys, arguments,
-- replies and stored values below are the contract's, and changing their
-- meaning bumps the version (WIRE.md says how).
--
-- KEYS: the buckets' Redis keys.
-- ARGV[1] the call: clock then op, two letters, and an optional third.
--         Clock "s" = server clock (redis TIME), "c" = client clock. Op
--         "t" take (with several keys a batch: each alone, in order, at
--         one time), "m" multi (all admit and all are charged, or none is),
--         "i" inspect (cost 0, nothing is written), "r" refund (one or
--         more keys, each alone), "a" take at most n, "v" reserve, "x"
--         cancel a reservation. With a client clock a take, partial grant
--         or reservation that refilled stores the refilled state and later
--         stamp, as algo returns it (in a denied multi only the denying
--         buckets do, as memstore); with the server clock only charges
--         write. A refund writes only n > 0 to a key that exists, a cancel
--         only what it gives back, on either clock. A key that holds
--         something that is not a bucket of this clock is repaired: it is
--         taken as an empty bucket stamped now (deficit = capacity, so it
--         denies until it refills: never more tokens than it could have
--         had), written so, and reported in the reply; a third letter "k"
--         keeps it instead and fails the call with RBCORRUPT (inspect
--         always does). A last letter "p" (keep tokens) or "q"
--         (proportional) converts a bucket written under another policy
--         (algo.TokenBucket.Rebase) and names the policy registry as the
--         last key: see "Policy changes" in WIRE.md, and rebase below.
-- Client clock only: ARGV[2] now, µs since the Unix epoch; ARGV[3] TTL
--         margin in ms beyond the fill time (-1 = no expiry).
-- Then per key: capacity, unit, refill (see algo.Policy) and the op's own:
--         cost (t, m, i: 0), n (r, a; at most capacity), cost and maxWait
--         µs (v), the ticket At, Units, Mark (x; At may have 19 digits).
-- The common call is thus: KEYS = {key}, ARGV = {"st", capacity, unit,
-- refill, cost}.
--
-- Reply: {now, all admitted (0/1), then per key: admitted (0/1), remaining,
-- retry-after µs, reset-after µs}; op "i" appends the stored deficit, the
-- stored stamp and the key's PTTL, "a" the tokens granted, "v" the delay
-- µs, At, Units and Mark (0 unless admitted with a delay), "x" given back
-- (0/1); then, for each repaired key, its index (1-based) and what it held
-- (1 another type, 2 the other clock's format, 3 a value that is not a
-- bucket, 4 a bad or missing expiry). Integers only: Redis truncates Lua
-- floats. A sum of a time and a duration past 2^53 (At, or a wait of 285
-- years) is sent as a string of its digits (see sum below).
--
-- Numbers are IEEE doubles, exact for integers up to 2^53. The bounds below
-- are algo's (Policy.Validate): full = capacity*unit <= 2^52, refill <= 2^52,
-- cost <= capacity, times < 2^53. A deficit is at most 2*full <= 2^53: one
-- full bucket of debt, which only a reservation makes (a larger stored
-- deficit reads as 2*full, as in algo). With them every level the script
-- forms is at most 2*full: d, full - cost*unit, d - full + cost*unit (in
-- that order: d + cost*unit reaches 3*2^52 in debt), a charged deficit.
-- A time plus a duration (a reply's t - now + wait, the time the bucket is
-- full again) may pass 2^53 in debt: those are formed in parts (sum and
-- store below). algo/tokenbucket.go and algo/ops.go have the argument.
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
--   A bucket in debt (deficit > capacity*unit) is written with a leading
--   "-", which version 1 of this script finds corrupt (it read a deficit
--   above full as full: it would admit reserved tokens early); the reader
--   drops it. Every other state keeps version 1's form.
--   Version 3, with a registry (call letter "p" or "q"): the value names
--   the policy that wrote it. Server clock: 19 digits, +-(OFFSET + d*10^5 +
--   u*100 + the policy's number), or "=<d>:<u>:<capacity>:<unit>:<refill>"
--   (see V3 and store below); client clock "<d>:<t>:<capacity>:<unit>:
--   <refill>". Version 2's values are read as written under the call's
--   policy; a call without a registry writes version 2's forms. A
--   calendar quota's value has the same forms (its count as d, u = 0, its
--   period's end as the expiry or t) and names its own policy, unit 0.

-- Speed: every call pays for the script's own work besides the Redis
-- commands it runs (TIME, GET, PEXPIRETIME, SET for a charge on the server
-- clock), and in Redis's Lua that work is mostly C calls (tonumber is
-- strtod, string.format is printf) and allocation (each local function
-- below is a closure built anew on every call). So the common call, a take
-- on one bucket with the server clock whose key is absent or holds digits,
-- runs first, before anything else is built: its arguments are checked with
-- plain comparisons, the state decoded by the arithmetic itself once a
-- pattern has found only digits (tonumber converts twice), divisions done
-- with the % operator (exact here: see ceildiv below; every dividend on
-- this path is at most 2^52, the fill time's excepted, which uses fmod),
-- numbers written with '%d' (integer formatting, not printf's float code),
-- and no table is built but the reply. It is the general path's take and
-- store, inlined, and gives the same answers: the tests run both paths (a client
-- clock, an inspect or a multi take the general one). Anything it does not
-- handle (another call, bad arguments, a value that is not plain digits, a
-- missing expiry, a bucket in debt, a stamp ahead of the server's clock, a
-- bucket full again only past 2^53 µs) falls through, having written nothing, to the general
-- path, which checks and reports everything. Measured with callgrind on
-- redis-server 7.0 (100k random keys, -P 16): 71.6k instructions per
-- call, against 93k when the common call went through the general
-- functions. The version 3 call ("stp") costs 84k: its HGET of the
-- policy's number and the 19-digit value (BENCHMARKS.md, "Policy
-- changes"). A quota's take has a fast path of its own, after the
-- bucket's (QUOTA below). A batch (below) costs per key, with the same
-- callgrind run on 100k random keys, one policy (CALLS="b2 b4 b8"
-- bench/scriptcost.sh): 84k instructions alone, 70.4k in twos, 57.3k
-- in fours and 50.0k in eights; one hot key 29.1k in eights.
local A, K = ARGV, KEYS
-- The same call with a policy registry (wire v3: "stp" or "stq", the
-- registry the last key) runs here too when its policy already has its
-- number (one HGET) and the key is absent or holds a version 3 integer of
-- that number in its positive half (see V3 below); a charge writes that
-- form. Anything else (a new policy, another policy's bucket: a
-- conversion, the long form, the negative half) is the general path's.
--
-- A batch, the take with several keys (each alone, in order: a pipeline
-- of takes in one call, which pays the call's own cost once), runs its
-- keys here one after the other, all at one server time, until one this
-- path does not handle: the general path goes on from that key (FIRST)
-- with the same time and reply, and the keys before it stay decided and
-- written. The policy's number is read once for a run of keys of one
-- policy, and a key that follows itself (a hot key) is taken from the
-- state the previous take left, not read again.
local nk = #K
local reg = (A[1] == 'stp' or A[1] == 'stq') and nk >= 2
if reg then nk = nk - 1 end
local FIRST, NOW, REPLY = 1
if (reg or A[1] == 'st') and nk >= 1 and #A == 1 + 4 * nk then
  local call, format = redis.call, string.format
  local now, reply = false, false
  local pc, pu, pr, f = false, false, false, 0 -- the last key's policy, and its number (v3)
  local lk, ld, lt, lv -- the last key, and the state its take left
  local P, i = A, 1 -- P: the arguments, as numbers in a batch
  if nk > 1 then
    -- Lua's strings are interned: an argument equal to the previous key's
    -- (a run of one policy, one cost) is the same string, compared at
    -- once and not converted again.
    P = {}
    for j = 2, #A do
      if j > 5 and A[j] == A[j - 4] then P[j] = P[j - 4] else P[j] = tonumber(A[j]) end
    end
  end
  -- Every key's arguments are checked before anything is written: one
  -- this path does not take (bad, or a quota's) leaves the whole call to
  -- the general path, which refuses bad arguments before writing. One
  -- key's are converted here, and kept.
  local cap, unit, refill, cost
  for j = 1, nk do
    local b = 4 * j - 3
    if nk == 1 then
      cap, unit, refill, cost = tonumber(A[2]), tonumber(A[3]), tonumber(A[4]), tonumber(A[5])
    else
      cap, unit, refill, cost = P[b + 1], P[b + 2], P[b + 3], P[b + 4]
    end
    if not (cap and unit and refill and cost and cap >= 1 and cap <= 1000000000000 and unit >= 1 and
      refill >= 1 and refill <= 4503599627370496 and cost >= 0 and cost <= cap and cap % 1 == 0 and
      unit % 1 == 0 and refill % 1 == 0 and cost % 1 == 0 and cap * unit <= 4503599627370496) then
      i = nk + 2
      break
    end
  end
  while i <= nk do
    local b = 4 * i - 3
    if nk > 1 then cap, unit, refill, cost = P[b + 1], P[b + 2], P[b + 3], P[b + 4] end
    local key, full, ok = K[i], cap * unit, true
    local same = cap == pc and unit == pu and refill == pr
    if reg and not same then
      f = redis.pcall('HGET', K[nk + 1], format('%d:%d:%d', cap, unit, refill))
      ok = type(f) == 'string'
      if ok then f = tonumber(f) end
    end
    if not ok then break end
    pc, pu, pr = cap, unit, refill
    local d, t, u, r, q, v = 0, 0, 0, 0, 0, false
    if key == lk and same then
      d, t, v = ld, lt, lv
    else
      v = redis.pcall('GET', key) -- an error reply (a table) falls through
      if v then
        if reg then -- OFFSET + d*10^5 + u*100 + number, read in parts
          ok = type(v) == 'string' and #v == 19 and v >= '9007199254740993000' and v <= '9223372036854775807' and
            string.find(v, '^[0-9]+$')
          if ok then -- digits only: the arithmetic converts them
            local a, c = string.sub(v, 1, 10) - 9007199254, string.sub(v, 11) - 740993000
            if c < 0 then a, c = a - 1, c + 1000000000 end
            local g = c % 100
            c = (c - g) / 100
            u = c % 1000
            d = a * 10000 + (c - u) / 1000
            ok = g == f
          end
        else -- version 2: d*1000 + u
          ok = type(v) == 'string' and string.find(v, '^[0-9]+$')
          local x = ok and v + 0
          ok = ok and x < 1e14
          if ok then
            u = x % 1000
            d = (x - u) / 1000
          end
        end
        if ok then
          local e = call('PEXPIRETIME', key)
          r = d % refill; q = (d - r) / refill; if r > 0 then q = q + 1 end
          t = e * 1000 - (q + u) -- e*1000 is a multiple of 8: exact below 2^56
          ok = e >= 0 and t >= 0 and t <= 9007199254740991 and d <= full -- debt: the general path
        end
      end
      if not ok then break end
    end
    if not now then
      local tm = call('TIME')
      now = tm[1] * 1000000 + tm[2] -- digits: the arithmetic converts them
    end
    if t > now then break end -- a stamp ahead of the server's clock: the general path
    local d0, t0 = d, t
    local need = cost * unit
    -- decide (the stamp becomes now)
    if now > t and d > 0 then
      r = d % refill; q = (d - r) / refill; if r > 0 then q = q + 1 end
      if now - t >= q then d = 0 else d = d - (now - t) * refill end
    end
    local admit, retry, reset = 0, 0, 0
    if d <= full - need then
      admit, d = 1, d + need
    else
      local a = d - full + need
      r = a % refill; q = (a - r) / refill; if r > 0 then q = q + 1 end
      retry = q
    end
    local idle = now -- when the bucket is full again
    if d > 0 then
      r = d % refill; q = (d - r) / refill; if r > 0 then q = q + 1 end
      idle = now + q
      reset = q
    end
    local rem = full - d
    rem = (rem - rem % unit) / unit
    -- store (a charge only, as on the general path); a bucket full
    -- again only past 2^53 µs (a fill time of a century, after the
    -- year 2112) is the general path's, having written nothing, and
    -- so is a v3 value in the negative half (d above 2.16e12)
    if admit == 0 or cost == 0 then
      lk, ld, lt, lv = key, d0, t0, v
    elseif idle <= 9007199254740991 and (not reg or d < 2161727821130) then
      lk, ld, lt, lv = key, d, now, true
      if idle <= now then
        if v then call('DEL', key) end
        ld, lt, lv = 0, 0, false
      else
        r = math.fmod(idle, 1000); local e = (idle - r) / 1000; if r > 0 then e = e + 1 end
        local val
        if reg then
          local dl = d % 10000
          local hi, lo = 9007199254 + (d - dl) / 10000, 740993000 + dl * 100000 + (e * 1000 - idle) * 100 + f
          if lo >= 1000000000 then hi, lo = hi + 1, lo - 1000000000 end
          val = format('%d%09d', hi, lo)
        elseif d < 9000000000000 then
          val = format('%d', d * 1000 + (e * 1000 - idle))
        else
          val = format('%.0f%03d', d, e * 1000 - idle)
        end
        call('SET', key, val, 'PXAT', format('%d', e))
      end
    else
      break
    end
    if nk == 1 then return {now, admit, admit, rem, retry, reset} end
    if not reply then reply = {now, 1} end
    if admit == 0 then reply[2] = 0 end
    local at = 4 * i - 1
    reply[at], reply[at + 1], reply[at + 2], reply[at + 3] = admit, rem, retry, reset
    i = i + 1
  end
  if i == nk + 1 then return reply end
  if i <= nk then FIRST, NOW, REPLY = i, now, reply end
end

-- quotaend returns the end (µs) of the period holding now of a calendar
-- quota (see "calendar quotas" below): algo's periodDays on whole seconds,
-- Hinnant's civil_from_days for months. It is built after the bucket's
-- fast path, which so pays no closure for it.
local function quotaend(kind, off, now)
  local fmod = math.fmod
  local function fl(a, b) return (a - fmod(a, b)) / b end -- floor(a/b), a >= 0
  local dn = fl((now - fmod(now, 1000000)) / 1000000 + off + 86400, 86400) - 1 -- the calendar's day, >= -1
  local e
  if kind == 1 then
    e = dn + 1
  elseif kind == 2 then
    e = dn - fmod(dn + 3, 7) + 7 -- day 4, 1970-01-05, was a Monday
  else
    local z = dn + 719468
    local era = fl(z, 146097)
    local doe = z - era * 146097
    local yoe = fl(doe - fl(doe, 1460) + fl(doe, 36524) - fl(doe, 146096), 365)
    local doy = doe - (365 * yoe + fl(yoe, 4) - fl(yoe, 100))
    local mp = fl(5 * doy + 2, 153)
    local d = doy - fl(153 * mp + 2, 5) + 1
    local y, m, len = yoe + era * 400, mp + 3, 31
    if mp >= 10 then y, m = y + 1, mp - 9 end
    if m == 2 then
      len = 28
      if fmod(y, 4) == 0 and (fmod(y, 100) ~= 0 or fmod(y, 400) == 0) then len = 29 end
    elseif m == 4 or m == 6 or m == 9 or m == 11 then
      len = 30
    end
    e = dn - d + 1 + len
  end
  return (e * 86400 - off) * 1000000
end

-- QUOTA: a take on a calendar quota (unit "0", refill -(kind + 4*(offset
-- + 86399)): algo's takeQuota) runs on a fast path of its own, with or
-- without a registry, when the key is absent or holds a count of this
-- quota (the v3 integer of its number, u = 0; without a registry, the
-- count's digits): a charge writes that form, as the general path does.
-- Anything else (a value of another policy, a new policy, bad arguments)
-- falls through, having written nothing. Measured as above (CALLS="st
-- quota quotap" bench/scriptcost.sh: a quota of 10^6 a month, 20k calls,
-- 100k random keys / one hot key): "st" 85.6k / 80.9k instructions a call
-- and "stp" 100.1k / 102.3k, against 150.6k / 150.0k and 172.3k / 191.1k
-- on the general path; a bucket's take is unchanged (70.8k / 63.4k).
if A[3] == '0' and (reg or (A[1] == 'st' and #K == 1)) and #A == 5 then
  local cap, refill, cost = tonumber(A[2]), tonumber(A[4]), tonumber(A[5])
  if cap and refill and cost and refill < 0 and refill % 1 == 0 and cap >= 1 and cap <= 1000000000000 and
    cap % 1 == 0 and cost >= 0 and cost <= cap and cost % 1 == 0 then
    local kind = -refill % 4
    local off = (-refill - kind) / 4 - 86399
    local call, key, format = redis.call, K[1], string.format
    local f, v, ok, c, t = 0, false, kind > 0 and off <= 86399, 0, 0 -- else not a quota: RBARG below
    if ok and reg then
      f = redis.pcall('HGET', K[2], format('%d:0:%d', cap, refill))
      ok = type(f) == 'string'
      if ok then f = tonumber(f) end
    end
    if ok then v = redis.pcall('GET', key) end
    if v then
      if reg then -- OFFSET + c*10^5 + 0*100 + number
        ok = type(v) == 'string' and #v == 19 and v >= '9007199254740993000' and v <= '9223372036854775807' and
          string.find(v, '^[0-9]+$')
        if ok then
          local a, b = string.sub(v, 1, 10) - 9007199254, string.sub(v, 11) - 740993000
          if b < 0 then a, b = a - 1, b + 1000000000 end
          local r = b % 100000
          c, ok = a * 10000 + (b - r) / 100000, r == f
        end
      else -- version 2: the count's digits
        ok = type(v) == 'string' and #v <= 13 and string.find(v, '^[0-9]+$')
        if ok then c = v + 0 end
      end
      if ok then
        local e = call('PEXPIRETIME', key)
        t = e * 1000
        ok = e >= 0 and t <= 9010050454740991 -- algo's maxQuotaEnd
      end
    end
    if ok then
      local tm = call('TIME')
      local now = tm[1] * 1000000 + tm[2]
      if c > cap then c = cap end
      if now >= t then c, t = 0, quotaend(kind, off, now) end
      local admit, retry, reset = 0, 0, 0
      if c <= cap - cost then admit, c = 1, c + cost else retry = t - now end
      if c > 0 then reset = t - now end
      if admit == 1 and cost > 0 then
        local val = format('%d', c)
        if reg then -- c <= 10^12: the positive half
          local cl = c % 10000
          local hi, lo = 9007199254 + (c - cl) / 10000, 740993000 + cl * 100000 + f
          if lo >= 1000000000 then hi, lo = hi + 1, lo - 1000000000 end
          val = format('%d%09d', hi, lo)
        end
        call('SET', key, val, 'PXAT', format('%d', t / 1000))
      end
      return {now, admit, admit, cap - c, retry, reset}
    end
  end
end

-- The general path.
local MAXLEVEL = 4503599627370496 -- 2^52
local MAXDEBT = 9007199254740992 -- 2^53
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

-- sum returns a + b for integers 0 <= a, b <= 2^53, for a reply: a number
-- when it is at most 2^53, else (a duration past 285 years: a lagging
-- client clock on a bucket whose fill time is near the bound, in debt) the
-- exact decimal digits, formed in two parts, as a bulk string.
local function sum(a, b)
  if a <= MAXDEBT - b then return a + b end
  local al, bl = fmod(a, 1000000), fmod(b, 1000000)
  local hi, lo = (a - al) / 1000000 + (b - bl) / 1000000, al + bl
  if lo >= 1000000 then hi, lo = hi + 1, lo - 1000000 end
  return format('%.0f%06d', hi, lo)
end

-- level returns the decimal digits s as a deficit, or nil above 2^53
-- (where tonumber would round: 2^53 + 1 would read as 2^53).
local function level(s)
  if #s > 16 or (#s == 16 and s > '9007199254740992') then return nil end
  return tonumber(s)
end

local function arg(i, lo, hi)
  local x = tonumber(ARGV[i])
  if x == nil or x ~= floor(x) or x < lo or x > hi then
    error({err = 'RBARG argument ' .. i .. ' (' .. tostring(ARGV[i]) .. ') not an integer in [' ..
      string.format('%.0f', lo) .. ', ' .. string.format('%.0f', hi) .. ']'})
  end
  return x
end

-- calendar returns a quota's kind and offset from its refill (argument
-- i): -(kind + 4*(offset + 86399)), kind 1-3, |offset| < 86400.
local function calendar(i, refill)
  local code = -refill
  local kind = fmod(code, 4)
  local off = (code - kind) / 4 - 86399
  if code ~= floor(code) or kind == 0 or off > 86399 then
    error({err = 'RBARG argument ' .. i .. ' (' .. tostring(ARGV[i]) .. ') not a quota'})
  end
  return kind, off
end

local call1, n = tostring(ARGV[1]), #KEYS
local clock, op, keep = string.sub(call1, 1, 1), string.sub(call1, 2, 2), string.sub(call1, 3)
-- A last letter "p" (keep tokens) or "q" (proportional) asks for a bucket
-- written under another policy to be converted (see rebase below); the
-- policy registry is then the last key.
local change = string.sub(keep, -1)
if change == 'p' or change == 'q' then keep, n = string.sub(keep, 1, -2), n - 1 else change = nil end
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
  now = NOW -- a batch's time, when the fast path began it
  if not now then
    local tm = call('TIME')
    now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  end
end

-- refilled returns the bucket (d, t) as algo's refill leaves it at now:
-- 1. time never runs backwards (t becomes max(now, t)); 2. the deficit,
-- read as at most 2*full (one bucket of debt), refills, forming
-- (now-t)*refill only when it is below d + refill.
local function refilled(d, t, full, refill)
  if d > full + full then d = full + full end
  if now > t then
    if d > 0 then
      if now - t >= ceildiv(d, refill) then d = 0 else d = d - (now - t) * refill end
    end
    t = now
  end
  return d, t
end

-- remaining is the whole tokens held at deficit d: none in debt.
local function remaining(d, full, unit)
  if d >= full then return 0 end
  return floordiv(full - d, unit)
end

-- The policy registry (wire v3): a hash, one per cluster slot in the
-- buckets' slot, that numbers the policies written there: field
-- "capacity:unit:refill" holds the policy's number (0-99, the first free,
-- counted by field "#"), and the number's field holds the policy. A
-- server-clock bucket stores its policy's number in its last two digits,
-- or, past 100 policies in a slot, its policy in full (the long form): so
-- a value always says which policy wrote it. Numbers are never reused.
local REG = change and KEYS[n + 1]

-- V3: a version 3 integer value is +-(OFFSET + x), OFFSET =
-- 9007199254740993000, for P = d*10^5 + u*100 + number: x = P when P <=
-- R = 2^63 - 1 - OFFSET, else "-" and x = P - R - 1. So it has 19 digits
-- whose first 16 pass 2^53, which a version 2 script finds corrupt (its
-- deficit digits above 2^53), and is below 2^63, which Redis keeps as an
-- integer. It is formed and read in two parts (10 and 9 digits, x as
-- a*10^9 + b), never whole; d stays at most V3MAXD, else the long form.
local V3HI, V3LO, V3MIN = 9007199254, 740993000, '9007199254740993000'
local RH, RL = 216172782, 113782808 -- R + 1 = RH*10^9 + RL
local V3MAXD = 4323455642275 -- floor((2R + 1)/10^5)

-- v3val returns the version 3 integer value of deficit d (at most
-- V3MAXD), u and policy number f, formed in parts (see V3).
local function v3val(d, u, f)
  local dl = fmod(d, 10000)
  local a, b, sign = (d - dl) / 10000, dl * 100000 + u * 100 + f, ''
  if a > RH or (a == RH and b >= RL) then -- P > R: the negative half
    a, b, sign = a - RH, b - RL, '-'
    if b < 0 then a, b = a - 1, b + 1000000000 end
  end
  local hi, lo = V3HI + a, V3LO + b
  if lo >= 1000000000 then hi, lo = hi + 1, lo - 1000000000 end
  return format('%s%d%09d', sign, hi, lo)
end

-- store writes the bucket's new state (d, t) at time now (t >= now), with
-- the sign that marks debt (d > full) to older scripts. It
-- is full again at idle = t + ceil(d/refill), which may pass 2^53 (a
-- stamp near 2^53, or two buckets of 2^52 at one unit a µs), so idle is
-- never formed: its parts below and above 1000 are added apart.
local function store(key, d, t, exists, refill, full, pol)
  local q = ceildiv(d, refill)
  if q <= now - t then -- idle <= now: full
    if exists then call('DEL', key) end
    return
  end
  local tl, ql = fmod(t, 1000), fmod(q, 1000)
  local c = ceildiv(tl + ql, 1000)
  if clock == 's' then
    -- E = ceil(idle/1000) ms, u = E*1000 - idle
    local e, u = (t - tl) / 1000 + (q - ql) / 1000 + c, c * 1000 - (tl + ql)
    -- Version 3 (with a registry): the integer OFFSET + d*10^6 + u*1000 +
    -- fingerprint (19 digits: see V3 below), or the long form
    -- "=<d>:<u>:<capacity>:<unit>:<refill>" when the policy does not own
    -- its fingerprint or d is too large. Without a registry, version 2.
    local v
    if not REG then
      if d > full then v = format('-%.0f%03d', d, u) elseif d > 0 then v = format('%.0f%03d', d, u) else v = format('%d', u) end
    elseif pol.fp and d <= V3MAXD then
      v = v3val(d, u, pol.fp)
    else
      v = format('=%.0f:%d:%.0f:%.0f:%.0f', d, u, pol.cap, pol.unit, refill)
    end
    call('SET', key, v, 'PXAT', format('%.0f', e))
  else
    local v
    if REG then
      v = format('%.0f:%.0f:%.0f:%.0f:%.0f', d, t, pol.cap, pol.unit, refill)
    else
      v = format('%.0f:%.0f', d, t)
      if d > full then v = '-' .. v end
    end
    if margin < 0 then
      call('SET', key, v)
    else
      -- ceil((idle - now)/1000) = ceil((t - now + q)/1000), in parts
      local a = t - now
      local al = fmod(a, 1000)
      c = ceildiv(al + ql, 1000)
      call('SET', key, v, 'PX', format('%.0f', (a - al) / 1000 + (q - ql) / 1000 + c + margin))
    end
  end
end

-- PER is how many arguments each op takes per key after capacity, unit
-- and refill: cost (or n); cost and maxWait; At, Units and Mark.
local PER = {t = 1, m = 1, i = 1, r = 1, a = 1, v = 2, x = 3}
if (clock ~= 's' and clock ~= 'c') or not PER[op] then
  error({err = 'RBARG bad clock or op'})
end
local per = 3 + PER[op]
local base = 1 -- the arguments before the first key's
if clock == 'c' then base = 3 end
if n < 1 or #ARGV ~= base + per * n then
  error({err = 'RBARG want ' .. per .. ' arguments per key'})
end
if op ~= 'm' and op ~= 'r' and op ~= 't' and n ~= 1 then
  error({err = 'RBARG only take, multi-take and refund are for several keys'})
end
if op == 't' and n > 1 and keep then -- its RBCORRUPT would come after the keys before it were written
  error({err = 'RBARG a batch of takes cannot keep corrupt keys'})
end
if clock ~= 's' then
  now = arg(2, 0, MAXTIME)
  margin = arg(3, -1, MAXTIME)
end
-- Several keys each alone (a batch of takes, a refund) are written one
-- by one: their arguments are all checked first, so that a call refused
-- for one key's has written nothing (the loop below checks them again,
-- with the op's own rules).
if n > 1 and op ~= 'm' then
  for i = FIRST, n do
    local b = base + per * (i - 1)
    local cap, unit, refill = arg(b + 1, 1, MAXCAP), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
    if unit == 0 and refill and refill < 0 then -- a quota
      calendar(b + 3, refill)
    elseif arg(b + 2, 1, MAXLEVEL) * cap > MAXLEVEL then
      error({err = 'RBARG capacity*unit above 2^52'})
    else
      arg(b + 3, 1, MAXLEVEL)
    end
    arg(b + 4, 0, cap)
  end
end

-- owner returns the policy registered under number f: capacity, unit
-- and refill (a quota's unit 0 and negative refill included), or nil
-- (none registered, or no registry).
local function owner(f)
  if not REG then return nil end
  local v = call('HGET', REG, f)
  if not v then return nil end
  local c, u, r = string.match(v, '^(%d+):(%d+):(%-?%d+)$')
  if not c then return nil end
  return tonumber(c), tonumber(u), tonumber(r)
end

-- valid reports whether capacity c, unit u and refill r, read from a
-- value or the registry, are a policy: a token bucket's (algo's bounds)
-- or a calendar quota's (unit 0, refill -(kind + 4*(offset + 86399))).
local function valid(c, u, r)
  if c < 1 or c > MAXCAP then return false end
  if u == 0 then
    local k = fmod(-r, 4)
    return r < 0 and k ~= 0 and (-r - k) / 4 <= 2 * 86399
  end
  return u >= 1 and r >= 1 and c * u <= MAXLEVEL and r <= MAXLEVEL
end

-- policy returns the call's policy for key i's store and decode, with its
-- number in the registry (fp), numbering it if it has none and fewer
-- than 100 are taken (inspect numbers nothing); fp is nil without one.
local function policy(cap, unit, refill)
  local pol = {cap = cap, unit = unit, refill = refill}
  if REG then
    local ps = format('%.0f:%.0f:%.0f', cap, unit, refill)
    local f = call('HGET', REG, ps)
    if not f and op ~= 'i' then
      local k = call('HINCRBY', REG, '#', 1) - 1
      if k < 100 then
        call('HSET', REG, ps, k, k, ps)
        f = k
      end
    end
    pol.fp = tonumber(f)
  end
  return pol
end

-- muldiv returns floor(a*b/c) (capped at 2^53) and whether it is exact,
-- for 0 <= a, b <= 2^52 and 1 <= c <= 2^52: the product, up to 2^104, in
-- four limbs of 26 bits, then divided a bit at a time (the remainder
-- stays below c, so 2r + 1 < 2^53).
local function muldiv(a, b, c)
  local T = 67108864 -- 2^26
  local a0, b0 = fmod(a, T), fmod(b, T)
  local a1, b1 = (a - a0) / T, (b - b0) / T
  local p0, p1, p2 = a0 * b0, a1 * b0 + a0 * b1, a1 * b1 -- each below 2^53
  local l0 = fmod(p0, T)
  p1 = p1 + (p0 - l0) / T
  local l1 = fmod(p1, T)
  p2 = p2 + (p1 - l1) / T
  local l2 = fmod(p2, T)
  local limbs = {(p2 - l2) / T, l2, l1, l0}
  local q, r = 0, 0
  for j = 1, 4 do
    local x, top = limbs[j], 25
    if j == 1 then top = 27 end -- the top limb is below 2^27
    for k = top, 0, -1 do
      local pk = 2 ^ k
      local bit = 0
      if x >= pk then bit, x = 1, x - pk end
      r = r + r + bit
      q = q + q
      if r >= c then q, r = q + 1, r - c end
      if q > MAXDEBT then return MAXDEBT, false end
    end
  end
  return q, r == 0
end

-- rebase is algo.TokenBucket.Rebase after its refill: the deficit d of a
-- bucket of from's full and unit, at now, as a deficit of the call's
-- bucket (full, unit) under the call's rule. A full bucket stays full;
-- held tokens (keep) or the fraction of a full bucket (proportional)
-- round down to the new unit, capped at full; debt rounds up, capped at
-- one bucket.
local function rebase(d, ffull, funit, full, unit)
  if d == 0 then return 0 end
  local num, den = unit, funit
  if change == 'q' then num, den = full, ffull end
  if d <= ffull then
    local h = muldiv(ffull - d, num, den)
    if h > full then h = full end
    return full - h
  end
  local x, exact = muldiv(d - ffull, num, den)
  if not exact then x = x + 1 end
  if x > full then x = full end
  return full + x
end

-- v3int returns the deficit, u and policy number of a version 3 integer
-- value (see V3), read in parts; nil for any other value.
local function v3int(v)
  local head = string.byte(v, 1)
  local w = string.sub(v, -19)
  if not ((#v == 19 or (#v == 20 and head == 45)) and w >= V3MIN and w <= '9223372036854775807' and
    not string.find(v, '%D', 2)) then
    return nil
  end
  local a, b = tonumber(string.sub(w, 1, 10)) - V3HI, tonumber(string.sub(w, 11)) - V3LO
  if b < 0 then a, b = a - 1, b + 1000000000 end
  if head == 45 then
    a, b = a + RH, b + RL
    if b >= 1000000000 then a, b = a + 1, b - 1000000000 end
  end
  local f = fmod(b, 100)
  b = (b - f) / 100
  local u = fmod(b, 1000)
  return a * 10000 + (b - u) / 1000, u, f
end

-- decode returns the stored deficit and stamp of key (0, 0 when absent),
-- whether it exists, and the policy it was written under when that is
-- known and not pol (capacity, unit, refill: the call then converts it);
-- for a key that holds no bucket of this clock it returns nil, nil, true
-- and the kind (or fails the call: see corrupt). A deficit may be up to
-- 2^53 (two buckets of 2^52: one in debt). Values of wire version 2
-- (server clock: digits, or "-" and digits in debt; client clock
-- "<deficit>:<stamp>", "-" in debt) carry no policy: they are read as
-- pol's, as version 2 read them.
local function decode(key, pol)
  local refill, full = pol.refill, pol.cap * pol.unit
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return nil, nil, true, corrupt(key, 1, 'holds a ' .. redis.call('TYPE', key)['ok'])
  end
  if not v then return 0, 0, false end
  local fc, fu, fr -- the policy that wrote it, when known
  if string.find(v, ':', 1, true) and string.byte(v, 1) ~= 61 then
    if clock ~= 'c' then return nil, nil, true, corrupt(key, 2, 'was written with a client clock') end
    local d, t, c, u, r = string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%-?%d+)$')
    local debt = false
    if d then
      fc, fu, fr = tonumber(c), tonumber(u), tonumber(r)
    else
      local sign
      sign, d, t = string.match(v, '^(%-?)(%d+):(%d+)$')
      debt = sign == '-'
    end
    d, t = d and level(d), tonumber(t)
    if d == nil or t == nil or t > MAXTIME or (debt and d <= full) or (fc and not valid(fc, fu, fr)) then
      return nil, nil, true, corrupt(key, 3, 'holds ' .. v)
    end
    if fc and fc == pol.cap and fu == pol.unit and fr == refill then fc = nil end
    if fc and fu == 0 then return 0, now, true, nil, fc, fu, fr end -- a quota's: afresh
    return d, t, true, nil, fc, fu, fr
  end
  if clock ~= 's' then return nil, nil, true, corrupt(key, 2, 'was written with the server clock') end
  local d, u
  local head = string.byte(v, 1)
  if head == 61 then -- "=": the long form
    local c, un, r
    d, u, c, un, r = string.match(v, '^=(%d+):(%d+):(%d+):(%d+):(%-?%d+)$')
    if not d or #u > 3 then return nil, nil, true, corrupt(key, 3, 'holds ' .. v) end
    d, u, fc, fu, fr = level(d), tonumber(u), tonumber(c), tonumber(un), tonumber(r)
  elseif v3int(v) then -- version 3's integer (see V3)
    local f
    d, u, f = v3int(v)
    if f ~= pol.fp then fc, fu, fr = owner(f) end
  else -- version 2: digits, or "-" and digits in debt; the policy unknown
    local w, debt = v, head == 45
    if debt then w = string.sub(v, 2) end
    local x = tonumber(w)
    if x and x >= 0 and x < 1e14 and x == floor(x) and tostring(x) == w then -- canonical digits
      u = fmod(x, 1000)
      d = (x - u) / 1000
    else
      if not string.match(w, '^%d+$') or #w > 19 then return nil, nil, true, corrupt(key, 3, 'holds ' .. v) end
      d, u = 0, tonumber(w)
      if #w > 3 then d, u = level(string.sub(w, 1, -4)), tonumber(string.sub(w, -3)) end
    end
    if d and debt and d <= full then d = nil end
  end
  if d == nil or (fc and not valid(fc, fu, fr)) then
    return nil, nil, true, corrupt(key, 3, 'holds ' .. v)
  end
  if fc and fc == pol.cap and fu == pol.unit and fr == refill then fc = nil end
  if fc and fu == 0 then return 0, now, true, nil, fc, fu, fr end -- a quota's: afresh
  local e = call('PEXPIRETIME', key)
  if e < 0 then return nil, nil, true, corrupt(key, 4, 'holds ' .. v .. ' with expiry ' .. e) end
  -- t = E*1000 - ceil(d/refill) - u, in parts, with the refill of the
  -- policy that wrote it: ceil(d/refill) may be near 2^53, and E*1000, a
  -- multiple of 8, is exact below 2^56.
  local q = ceildiv(d, fr or refill)
  local ql = fmod(q, 1000)
  local t = (e - (q - ql) / 1000) * 1000 - (ql + u)
  if t < 0 or t > MAXTIME then return nil, nil, true, corrupt(key, 4, 'holds ' .. v .. ' with expiry ' .. e) end
  return d, t, true, nil, fc, fu, fr
end

local reply = REPLY or {now, 1} -- a batch's keys before FIRST are in REPLY
local pend = {}
local repaired = {} -- index, kind of each repaired key

-- BEGIN calendar quotas (algo/quota.go; WIRE.md, "Calendar quotas"). A key
-- whose policy has unit 0 and a negative refill is a quota of capacity per
-- calendar period: refill = -(kind + 4*(offset + 86399)), kind 1 a day, 2 a
-- week from Monday, 3 a month from the 1st, offset the calendar's seconds
-- from UTC (|offset| < 86400). Its state is the count charged in a period
-- and the period's end t (µs): server clock, the count's digits with
-- PEXPIREAT t/1000 (t is a whole second); client clock, "<count>:<t>";
-- with a registry the forms that name the policy (see store below). A
-- quota is only taken (t, m), refunded (r) or inspected (i). The math is
-- algo's takeQuota and refundQuota: from t on the count is 0 in the period
-- of now; else (the stored period, or a clock behind it) a count above
-- capacity reads as capacity; admit when count + cost <= capacity, or for
-- a refund subtract n, never below 0; retry-after is t - now, and so is
-- reset-after while the count is above 0. A count of 0 is no state: the
-- key is deleted. Every number is an integer below 2^53 but the
-- period end near the year 2255 (below 2^54, a multiple of 10^6, so exact),
-- and t - now is exact.
local MAXQEND = 9010050454740991 -- algo's maxQuotaEnd: MaxTime + 33 days

-- qdecode returns the stored count and period end of a quota's key (0, 0
-- when absent) and whether it exists, for a call under pol (of calendar
-- kind, off); a key that holds no quota of this clock gives nil, nil,
-- true and the kind, as decode does for a bucket. With a registry a value
-- that names another policy also returns that policy (capacity, unit,
-- refill): a quota's count and end as stored, a bucket's as 0, 0 (it
-- starts afresh). Version 2's values (the count's digits; "<c>:<end>")
-- name no policy: read as pol's, as version 2 read them, but, with a
-- registry, one whose end is no period end of pol's calendar was written
-- under another calendar or is a bucket's, and starts afresh as
-- algo.TokenBucket.Rebase has it.
local function qdecode(key, pol, kind, off)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return nil, nil, true, corrupt(key, 1, 'holds a ' .. redis.call('TYPE', key)['ok'])
  end
  if not v then return 0, 0, false end
  local c, t, fc, fu, fr, old
  if clock == 's' then
    local head = string.byte(v, 1)
    if string.find(v, ':', 1, true) and head ~= 61 then
      return nil, nil, true, corrupt(key, 2, 'was written with a client clock')
    end
    if head == 61 then -- the long form
      local d, u, cc, un, r = string.match(v, '^=(%d+):(%d+):(%d+):(%d+):(%-?%d+)$')
      if d then c, fc, fu, fr = level(d), tonumber(cc), tonumber(un), tonumber(r) end
      if not c or not valid(fc, fu, fr) or #u > 3 then return nil, nil, true, corrupt(key, 3, 'holds ' .. v) end
    elseif v3int(v) then -- version 3's integer
      local f
      c, t, f = v3int(v)
      if f ~= pol.fp then fc, fu, fr = owner(f) end
    else -- version 2: the count's digits
      if not string.match(v, '^%d+$') or #v > 13 then return nil, nil, true, corrupt(key, 3, 'holds ' .. v) end
      c, old = tonumber(v), true
    end
    if fc and fc == pol.cap and fu == pol.unit and fr == pol.refill then fc = nil end
    if fc and fu ~= 0 then return 0, 0, true, nil, fc, fu, fr end -- a bucket's: afresh
    local e = call('PEXPIRETIME', key)
    if e < 0 or e * 1000 > MAXQEND then return nil, nil, true, corrupt(key, 4, 'holds ' .. v .. ' with expiry ' .. e) end
    t = e * 1000
  else
    local d, e, cc, un, r = string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%-?%d+)$')
    if d then
      fc, fu, fr = tonumber(cc), tonumber(un), tonumber(r)
      if not valid(fc, fu, fr) then return nil, nil, true, corrupt(key, 3, 'holds ' .. v) end
      if fc == pol.cap and fu == pol.unit and fr == pol.refill then fc = nil end
      if fc and fu ~= 0 then return 0, 0, true, nil, fc, fu, fr end -- a bucket's: afresh
    else
      d, e = string.match(v, '^(%d+):(%d+)$')
      if not d then
        if string.match(v, '^%d+$') then return nil, nil, true, corrupt(key, 2, 'was written with the server clock') end
        return nil, nil, true, corrupt(key, 3, 'holds ' .. v)
      end
      old = true
    end
    if #d > 13 or #e > 17 or tonumber(e) > MAXQEND then return nil, nil, true, corrupt(key, 3, 'holds ' .. v) end
    c, t = tonumber(d), tonumber(e)
  end
  if old and REG and t >= 1000000 and quotaend(kind, off, t - 1) ~= t then return 0, 0, true end
  return c, t, true, nil, fc, fu, fr
end

-- store, for a policy with refill < 0, writes a quota's count d and period
-- end t (> now when d > 0); a count of 0 deletes the key. With a registry
-- the value names its policy: the version 3 integer of its number (u =
-- 0), or the long form; client clock "<c>:<end>:<capacity>:0:<refill>".
local bstore = store
store = function(key, d, t, exists, refill, full, pol)
  if refill > 0 then return bstore(key, d, t, exists, refill, full, pol) end
  if d == 0 then
    if exists then call('DEL', key) end
    return
  end
  local v
  if clock == 's' then
    if not REG then
      v = format('%d', d)
    elseif pol.fp then
      v = v3val(d, 0, pol.fp)
    else
      v = format('=%d:0:%d:0:%d', d, pol.cap, refill)
    end
    call('SET', key, v, 'PXAT', format('%.0f', t / 1000))
    return
  end
  v = format('%d:%.0f', d, t)
  if REG then v = v .. format(':%d:0:%d', pol.cap, refill) end
  if margin < 0 then
    call('SET', key, v)
  else
    call('SET', key, v, 'PX', format('%.0f', ceildiv(t - now, 1000) + margin))
  end
end

-- quota decides key i (its arguments from b + 1) when its policy is a
-- quota, as the loop below decides a bucket, and returns true; false for
-- a bucket. A key written under another policy is first converted as
-- algo.TokenBucket.Rebase converts it (rebaseQuota), when the call asks
-- for conversions: from a quota of the same calendar (kind and offset)
-- whose period has not ended, the count is kept (at most the old and new
-- capacity; "q" scales it by the ratio of the capacities, rounded up);
-- from anything else (another calendar, a bucket) the key starts afresh.
-- The call then writes it, whatever its op, as for a bucket.
local function quota(i, b, cap)
  local unit, refill = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  if unit ~= 0 or refill == nil or refill >= 0 then return false end
  local kind, off = calendar(b + 3, refill)
  if op ~= 't' and op ~= 'm' and op ~= 'i' and op ~= 'r' then error({err = 'RBARG a quota is only taken, refunded or inspected'}) end
  local cost = arg(b + 4, 0, cap)
  if op == 'i' and cost ~= 0 then error({err = 'RBARG inspect takes cost 0'}) end
  local key = KEYS[i]
  local pol = policy(cap, 0, refill)
  local c0, t0, exists, kind2, fc, fu, fr = qdecode(key, pol, kind, off)
  if kind2 then -- repair: the period of now, spent
    c0, t0 = cap, quotaend(kind, off, now)
    repaired[#repaired + 1], repaired[#repaired + 2] = i, kind2
  end
  local conv = false
  if fc and change then
    conv = true
    if fu == 0 and fr == refill and now < t0 and c0 > 0 then -- the same calendar, its period running
      if c0 > fc then c0 = fc end
      if change == 'q' then
        local x, exact = muldiv(c0, cap, fc)
        if not exact then x = x + 1 end
        c0 = x
      end
      if c0 > cap then c0 = cap end
    else
      c0, t0 = 0, 0
    end
  end
  local c, t, ok, retry, reset = c0, t0, 1, 0, 0
  if c > cap then c = cap end
  if now >= t then c, t = 0, quotaend(kind, off, now) end
  if op == 'r' then
    c = c - cost
    if c < 0 then c = 0 end
  elseif c <= cap - cost then
    c = c + cost
  else
    ok, retry = 0, t - now
  end
  if c > 0 then reset = t - now else t = 0 end
  if ok == 0 then reply[2] = 0 end
  local at = #reply
  reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = ok, cap - c, retry, reset
  local charged, changed = ok == 1 and cost > 0, c ~= c0 or t ~= t0
  if op == 'i' then
    reply[at + 5], reply[at + 6], reply[at + 7] = c0, t0, call('PTTL', key)
  elseif op == 'm' then
    pend[i] = {d = c, t = t, changed = changed, exists = exists, refill = refill, full = 0, ok = ok, charged = charged, kind = kind2,
      pol = pol, conv = conv, d0 = c0, t0 = t0}
  elseif op == 'r' then -- a refund writes only n > 0 to a key that exists
    if (exists and cost > 0) or kind2 or conv then store(key, c, t, exists, refill, 0, pol) end
  elseif (clock == 's' and charged) or (clock ~= 's' and changed) or kind2 or conv then
    store(key, c, t, exists, refill, 0, pol)
  end
  return true
end
-- END calendar quotas

for i = FIRST, n do
  local b = base + per * (i - 1)
  local cap = arg(b + 1, 1, MAXCAP)
  if not quota(i, b, cap) then -- a bucket (a quota was decided above)
  local unit = arg(b + 2, 1, MAXLEVEL)
  local refill = arg(b + 3, 1, MAXLEVEL)
  local full = cap * unit
  if full > MAXLEVEL then error({err = 'RBARG capacity*unit above 2^52'}) end
  local cost, wait, ath, atl, units, mark = 0
  if op == 'x' then
    -- At, a µs time that may pass 2^53, read as ath*10^6 + atl
    local s = tostring(ARGV[b + 4])
    if not string.match(s, '^%d+$') or #s > 19 then error({err = 'RBARG argument ' .. (b + 4) .. ' (' .. s .. ') not a time'}) end
    ath, atl = 0, tonumber(s)
    if #s > 6 then ath, atl = tonumber(string.sub(s, 1, -7)), tonumber(string.sub(s, -6)) end
    units, mark = arg(b + 5, 0, full + full), arg(b + 6, 0, full + full)
  else
    cost = arg(b + 4, 0, cap)
    if op == 'v' then wait = arg(b + 5, 0, MAXTIME) end
  end
  if op == 'i' and cost ~= 0 then error({err = 'RBARG inspect takes cost 0'}) end

  local pol = policy(cap, unit, refill)
  local d0, t0, exists, kind, fc, fu, fr = decode(KEYS[i], pol)
  if kind then -- repair: an empty bucket stamped now
    d0, t0 = full, now
    repaired[#repaired + 1], repaired[#repaired + 2] = i, kind
  end
  -- A bucket written under another policy (fc, fu, fr) is refilled under
  -- it and converted (algo.TokenBucket.Rebase), when the call asks for
  -- conversions; the call then writes it, whatever its op.
  local conv = false
  if fc and change then
    if fu == 0 then -- a calendar quota (no common measure): afresh
      d0, t0 = 0, now
    else
      local dd, tt = refilled(d0, t0, fc * fu, fr)
      d0, t0 = rebase(dd, fc * fu, fu, full, unit), tt
    end
    conv = true
  end
  -- Steps 1 and 2 (refill), then the op's own, as algo's functions.
  -- charged: what the server clock writes (a charge, or what a refund or
  -- cancel gives back); extra: the op's fields of the reply.
  local d, t = refilled(d0, t0, full, refill)
  local need = cost * unit
  local ok, retry, rem, charged, extra = 1, 0
  if op == 'r' then
    -- Refund: the deficit less n*unit (<= full), never below 0.
    d = d - need
    if d < 0 then d = 0 end
    charged = exists and cost > 0
  elseif op == 'a' then
    -- TakeAtMost: grant g = min(n, whole tokens held) (g*unit <= full - d);
    -- none for n > 0 is a denied take of 1 (d - full + unit <= 2*full).
    local held = remaining(d, full, unit)
    local g = cost
    if g > held then g = held end
    if g > 0 then
      d = d + g * unit
    elseif cost > 0 then
      ok, retry = 0, sum(t - now, ceildiv(d - full + unit, refill))
    end
    rem, charged, extra = held - g, g > 0, {g}
  elseif op == 'v' then
    -- Reserve: at once as a take when d <= full - need (or cost is 0,
    -- which charges nothing even in debt); else its tokens
    -- exist after w = ceil((d - full + need)/refill) µs, admitted when w is
    -- at most maxWait and floor(full/refill) (one bucket of debt), with the
    -- state a take at t + w would leave: max(d, w*refill) + need, where
    -- w*refill <= full, so the deficit stays <= 2*full. At = t + w may pass
    -- 2^53 (sum). Refused: the exact wait until w fits, nothing charged.
    local delay, due, give, left = 0, 0, 0, 0
    if need == 0 or d <= full - need then
      d = d + need
    else
      local w = ceildiv(d - full + need, refill)
      local limit = floordiv(full, refill)
      if wait < limit then limit = wait end
      if w > limit then
        ok, retry = 0, sum(t - now, w - limit)
      else
        local wr = w * refill
        local from = d
        if wr > from then from = wr end -- the refill past full in the last µs spills
        delay, due, give, left = w, sum(t, w), from - d + need, from - wr + need
        d = from + need
      end
    end
    charged, extra = ok == 1 and need > 0, {delay, due, give, left}
  elseif op == 'x' then
    -- Cancel: give Units back when the reservation still waits (t < At,
    -- At - t <= floor(full/refill) + 1, so (At - t)*refill <= full +
    -- refill) and is last in line (the bucket holds Mark at At: d minus
    -- the refill until At, formed as a difference).
    local tl = fmod(t, 1000000)
    local due = (ath - (t - tl) / 1000000) * 1000000 + (atl - tl) -- At - t, in parts
    charged = units > 0 and due > 0 and due <= floordiv(full, refill) + 1 and d - due * refill == mark
    if charged then
      d = d - units
      if d < 0 then d = 0 end
    end
    extra = {charged and 1 or 0}
  else
    -- Take, multi-take, inspect: 3. admit and charge (d <= full - need:
    -- d + need reaches 3*2^52 in debt), admit a peek even in debt, or 4.
    -- deny with the exact wait (d - full + need <= 2*full, in that order).
    if d <= full - need then
      d = d + need
    elseif need > 0 then
      ok, retry = 0, sum(t - now, ceildiv(d - full + need, refill))
    end
    charged = ok == 1 and need > 0
  end
  if not rem then rem = remaining(d, full, unit) end
  local reset = 0
  if d > 0 then reset = sum(t - now, ceildiv(d, refill)) end

  if ok == 0 then reply[2] = 0 end
  local at = #reply
  reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = ok, rem, retry, reset
  if extra then
    for j = 1, #extra do reply[at + 4 + j] = extra[j] end
  end
  -- changed: a client clock's store would write the state (or drop a
  -- bucket that is full at now: a refund's, stamped ahead of a lagging
  -- clock, is kept until then, as memstore keeps it)
  local changed = d ~= d0 or t ~= t0 or (exists and d == 0 and t == now)
  if op == 'i' then
    reply[at + 5], reply[at + 6], reply[at + 7] = d0, t0, call('PTTL', KEYS[i])
  elseif op == 'm' then
    pend[i] = {d = d, t = t, changed = changed, exists = exists, refill = refill, full = full, ok = ok, charged = charged, kind = kind,
      pol = pol, conv = conv, d0 = d0, t0 = t0}
  else
    -- Each bucket alone. With the server clock only a charge writes: a
    -- denial or peek that merely refilled changes nothing a later call on
    -- the same clock can see (it computes the same refill from the older
    -- state), so it saves the write and its replication. With a client
    -- clock a changed state is written (a later stamp), except by a
    -- refund and a cancel, which write only what they give back (as
    -- memstore, which keeps no bucket for them otherwise).
    local write = charged
    if clock ~= 's' and op ~= 'r' and op ~= 'x' then write = changed end
    if write or kind or conv then store(KEYS[i], d, t, exists, refill, full, pol) end
  end
  end -- not a quota
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
  if clock == 's' then write = p.charged and reply[2] == 1 end
  if write or p.kind then
    store(KEYS[i], p.d, p.t, p.exists, p.refill, p.full, p.pol)
  elseif p.conv then -- converted, not charged: kept converted
    store(KEYS[i], p.d0, p.t0, p.exists, p.refill, p.full, p.pol)
  end
end
return append()
