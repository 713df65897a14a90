-- tokenbucket.lua: the Lua twin of algo.TokenBucket (algo/tokenbucket.go,
-- ops.go, quota.go, rebase.go), applied atomically to one or more buckets.
-- The tests in this package hold the two to identical Results, bit for bit.
--
-- Wire contract: version 1 (WIRE.md beside this file, "The script", gives
-- KEYS, ARGV and the reply; js/ loads this file by path).
--
-- Numbers are doubles, exact up to 2^53. With algo's bounds (capacity*unit
-- and refill <= 2^52, cost <= capacity, times below 2^53, a deficit at
-- most two full buckets) every level formed, in the order written, is at
-- most 2^53. a % b is exact for a <= 2^52; above, math.fmod is used.
--
-- Speed (callgrind, bench/scriptcost.sh): a call pays about 15k, 1.1k an argument, 3k to 11k a Redis command
-- (TIME 7k), 1.9k a string formatted, 0.5k a library call, 0.7k to build a closure (anew each call), 45 a Lua
-- instruction, and for its reply packed in one string 1k and 0.45k an integer (a table: 5k and 0.5k a field).
-- So the common take has a path of its own; the general path decides each key in one pass of straight code.

-- The common call, a take on the server clock ("st", "stq" or none; several keys are a batch, each taken alone,
-- in order, at one time) of buckets absent or holding a short value of the call's policy, not in debt, is the
-- general path's take written straight: 62.1k instructions a take on 100k random keys, 53.4k on a hot key, 38.4k
-- a key in fours. The general path takes anything else, from the first key this one does not take, at the same
-- time (FIRST, NOW, REPLY): the keys before it stay decided and written. PS, PV: a policy and the registry's
-- value for it, as read here.
local FIRST, NOW, REPLY, PS, PV = 1
local I8 = '>i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8' -- cut to length, the format of a packed reply
do
  local A, nk, o, s = ARGV, #KEYS - 1, 1, 2 -- o: the index of the first policy; s: arguments a key
  if A[1] == 'st' or A[1] == 'stq' then o = 2 elseif (A[1] or '') >= 'a' then nk = 0 end -- (another call: a policy is digits)
  if #A == o - 1 + nk then s = 1 end -- costs of 1, left out
  if nk >= 1 and #A == o - 1 + s * nk then
    -- Every key's policy, registered (so checked) with its number and integers, and cost first (letters are no
    -- policy): nothing is written for a call not taken here.
    local i, cost, call, ps, rv, cap, unit, refill, full, num, costarg = 1, 1, redis.call -- (a cost left out is 1)
    for b = #A + 1 - s, o, -s do -- backwards, to keep the first key's
      if A[b] ~= ps then
        ps, costarg = A[b], nil
        rv = call('HGET', KEYS[nk + 1], ps)
        if not rv or #rv ~= 32 then i = nk + 2 break end
        num, cap, unit, refill = struct.unpack('>i8i8i8i8', rv)
        if unit == 0 then i = nk + 2 break end -- (a quota)
        full = cap * unit
      end
      if s == 2 and A[b + 1] ~= costarg then -- (a batch's costs are mostly one string, read once)
        costarg = A[b + 1]
        cost = tonumber(costarg)
        if not cost or cost % 1 ~= 0 or cost < 0 or cost > cap then i = nk + 2 break end
      end
    end
    local reply, now, lastkey, lastd, lastt -- last*: the state the previous take left (a hot key in a batch)
    local lastvalue, valuearg, lastms, msarg -- the last write, formatted: fresh keys in a batch write alike (-2.6k a key in fours)
    while i <= nk do
      local b = o + s * (i - 1)
      if A[b] ~= ps then -- (registered: checked above)
        ps, lastkey = A[b], nil
        rv = call('HGET', KEYS[nk + 1], ps)
        num, cap, unit, refill = struct.unpack('>i8i8i8i8', rv)
        full = cap * unit
      end
      if s == 2 and i > 1 and A[b + 1] ~= costarg then costarg = A[b + 1] cost = costarg + 0 end
      local key, d, t = KEYS[i], 0, 0
      if key == lastkey then
        d, t = lastd, lastt
      else
        local v = redis.pcall('GET', key)
        if v then -- d*10^5 + u*100 + num below 2^53, with the stamp from the expiry
          if #v == 0 or #v > 15 or not string.find(v, '^%d+$') then break end -- (an error is a table, of length 0)
          local x = v + 0
          if x % 100 ~= num then break end
          local u = (x % 100000 - num) / 100
          d = (x - x % 100000) / 100000
          if d > full then break end
          local e, r = call('PEXPIRETIME', key), d % refill
          t = e * 1000 - ((d - r) / refill + u) -- E*1000 - ceil(d/refill) - u
          if r > 0 then t = t - 1 end
          if e < 0 or t < 0 or e > 9007199254740 then break end
        end
      end
      local tm = not now and call('TIME')
      if tm then now = tm[1] * 1000000 + tm[2] end
      if t > now or now > 4000000000000000 then break end -- (before 2096 every sum below is under 2^53 - 1000)
      -- Refill, then admit and charge, or deny with the exact wait.
      local d0, ok, retry, reset, r = d, 1, 0, 0
      if d > 0 then
        r = d % refill
        if now - t >= (d - r) / refill + (r > 0 and 1 or 0) then d = 0 else d = d - (now - t) * refill end
      end
      local need = cost * unit
      if d <= full - need then
        d = d + need
      else
        r = (d - full + need) % refill
        ok, retry = 0, (d - full + need - r) / refill + (r > 0 and 1 or 0)
      end
      if d > 0 then
        r = d % refill
        reset = (d - r) / refill + (r > 0 and 1 or 0)
      end
      local rem = (full - d - (full - d) % unit) / unit
      if ok == 1 and cost > 0 then -- written as the general path writes it (past 2^53: by it)
        if d >= 90071992547 then break end
        local idle = now + reset
        local ms = (idle + 999 - (idle + 999) % 1000) / 1000
        local value = d * 100000 + (ms * 1000 - idle) * 100 + num
        if value ~= lastvalue or ms ~= lastms then
          lastvalue, lastms, valuearg, msarg = value, ms, string.format('%d', value), string.format('%d', ms)
        end
        call('SET', key, valuearg, 'PXAT', msarg)
        lastkey, lastd, lastt = key, d, now
      else
        lastkey, lastd, lastt = key, d0, t
      end
      if nk == 1 then return struct.pack('>i8i8i8i8i8i8', now, ok, ok, rem, retry, reset) end
      reply = reply or {now, 1}
      if ok == 0 then reply[2] = 0 end
      local at = 4 * i - 2
      reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = ok, rem, retry, reset
      i = i + 1
    end
    if i == nk + 1 then -- packed by a literal format (one cut from I8 costs 2k more)
      local f = nk == 8 and I8 or nk == 4 and '>i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8'
      f = f or nk == 2 and '>i8i8i8i8i8i8i8i8i8i8' or nk == 3 and '>i8i8i8i8i8i8i8i8i8i8i8i8i8i8'
      return struct.pack(f or #reply > 34 and string.rep('>i8', #reply) or string.sub(I8, 1, 2 * #reply + 1), unpack(reply))
    end
    if i <= nk then FIRST, NOW, REPLY = i, now, reply end
    PS, PV = ps, rv
  end
end

local call = redis.call -- the general path; its helpers take what they need (sum sets big alone)
-- ceildiv returns ceil(a/b) for 0 <= a <= 2^53, 1 <= b <= 2^52.
local function ceildiv(a, b)
  local r = a % b
  if a > 4503599627370496 then r = math.fmod(a, b) end
  return (a - r) / b + (r > 0 and 1 or 0)
end

-- int returns ARGV[i], an integer in [lo, hi], or refuses the call.
local function int(i, lo, hi)
  local x = tonumber(ARGV[i])
  if not x or x % 1 ~= 0 or x < lo or x > hi then
    error({err = string.format('RBARG argument %d (%s) not an integer in [%.0f, %.0f]', i, tostring(ARGV[i]), lo, hi)})
  end
  return x
end

-- policy returns the capacity, unit and refill in s ("capacity:unit:refill"), or nothing when they are no
-- policy: a token bucket's within algo's bounds, or a calendar quota's (unit 0, refill -(kind + 4*(offset
-- + 86399)), kind 1-3, |offset| < 86400).
local function policy(s)
  local cap, unit, refill = string.match(s, '^([1-9]%d*):(%d+):(%-?[1-9]%d*)$')
  if not cap then return end
  cap, unit, refill = cap + 0, unit + 0, refill + 0
  if cap > 1000000000000 then return end
  if unit == 0 and refill < 0 and -refill % 4 ~= 0 and -refill <= 691195 then return cap, unit, refill end
  if unit > 0 and refill >= 1 and refill <= 4503599627370496 and cap * unit <= 4503599627370496 then return cap, unit, refill end
end

-- The call.
local nkeys, registry = #KEYS - 1, KEYS[#KEYS]
local word, first = 'st', 1 -- first: the index of the first key's policy
local head = string.byte(ARGV[1] or '')
if head and head > 57 then word, first = ARGV[1], 2 end -- a letter: the call
local clock, op, keep, proportional = 's', 't', false, false
if word ~= 'st' then
  local k, q
  clock, op, k, q = string.match(word, '^([sc])([tmiravxhe])(k?)(q?)$')
  if not clock then error({err = 'RBARG bad call ' .. word}) end
  keep, proportional = k == 'k', q == 'q'
end
local per, hold = 2 -- the policy and the op's numbers; a hold's record (KEYS[2], WIRE.md "Holds")
if op == 'v' or op == 'h' then per = 3 elseif op == 'x' or op == 'e' then per = 4 end
if op == 'h' or op == 'e' then nkeys, hold = nkeys - 1, KEYS[2] end
local now, margin
if clock == 'c' then now, margin, first = int(first, 0, 9007199254740991), int(first + 1, -1, 9007199254740991), first + 2 end
if per == 2 and #ARGV == first - 1 + nkeys then per = 1 end -- every key's one number 1, left out
if nkeys < 1 or #ARGV ~= first - 1 + per * nkeys then error({err = 'RBARG want the registry last, ' .. per .. ' arguments a key'}) end
if nkeys > 1 and not (op == 't' or op == 'm' or op == 'r') then error({err = 'RBARG one key only for this op'}) end
if nkeys > 1 and op == 't' and keep then error({err = 'RBARG a batch of takes cannot keep corrupt keys'}) end -- (RBCORRUPT after writes)
keep = keep or op == 'i'
local taking = op == 't' or op == 'm' or op == 'i' or op == 'h' -- a take, multi-take, peek or hold
-- Keys each alone (a batch, a refund) are written one by one: all checked first.
if nkeys > 1 then
  local last, cap
  for i = first, #ARGV, per do
    if ARGV[i] ~= last then
      last, cap = ARGV[i], policy(ARGV[i])
      if not cap then error({err = 'RBARG argument ' .. i .. ' (' .. ARGV[i] .. ') not a policy'}) end
    end
    if per == 2 then int(i + 1, 0, cap) end
  end
end
local tm = clock == 's' and not NOW and call('TIME') -- (a batch's time: NOW, when the common take began it)
if clock == 's' then now = tm and tm[1] * 1000000 + tm[2] or NOW end

local reply, at = REPLY or {now, 1}, 2 + 4 * (FIRST - 1) -- at: the reply's last field so far
local repaired, pend, sum, big -- the repaired keys; a multi-take's decisions; see sum below
local ps, cap, unit, refill, full, num -- the previous key's policy: a run of one is read once

-- Each key is decided and written in turn; a multi-take writes in pass 2.
for pass = 1, op == 'm' and 2 or 1 do
  for i = FIRST, nkeys do
    local key = KEYS[i]
    local d, t, exists, writes -- the state to write, and whether to
    if pass == 2 then
      -- A denied multi-take leaves the keys that would have admitted alone;
      -- a repaired key is written as decided, a converted one converted.
      local p = pend[i]
      d, t, exists, cap, unit, refill, num = p[1], p[2], p[3], p[4], p[5], p[6], p[7]
      writes = p[10] and not (reply[2] == 0 and p[8] == 1)
      if clock == 's' then writes = p[9] and reply[2] == 1 end
      writes = writes or p[11]
      if not writes and p[12] then d, t, writes = p[13], p[14], true end
    else
      local b = first + per * (i - 1)
      if ARGV[b] ~= ps then
        ps = ARGV[b]
        cap, unit, refill = policy(ps)
        if not cap then error({err = 'RBARG argument ' .. b .. ' (' .. ps .. ') not a policy'}) end
        if unit == 0 and not (taking and op ~= 'h' or op == 'r') then error({err = 'RBARG a quota is only taken, refunded or inspected'}) end
        full, num = cap * unit, nil
        if clock == 's' then -- the policy's number in the registry (WIRE.md, "Policy changes")
          if ps == PS then num, PS = PV, nil else num = call('HGET', registry, ps) end -- its number and integers
          num = num and #num == 32 and string.byte(num, 8) -- (the number, below 100, is its low byte)
          if not num and op ~= 'i' then -- none yet: the next, while fewer than 100 are taken
            num = call('HINCRBY', registry, '#', 1) - 1
            if num < 100 then call('HSET', registry, ps, struct.pack('>i8i8i8i8', num, cap, unit, refill), num, ps) else num = nil end
          end
        end
      end
      local cost, wait, ath, atl, units, mark = 0
      if op == 'x' then -- At, a µs time that may pass 2^53, read as ath*10^6 + atl
        local s = ARGV[b + 1]
        if not string.find(s, '^%d+$') or #s > 19 then error({err = 'RBARG argument ' .. (b + 1) .. ' (' .. s .. ') not a time'}) end
        ath, atl = 0, s + 0
        if #s > 6 then ath, atl = string.sub(s, 1, -7) + 0, string.sub(s, -6) + 0 end
        units, mark = int(b + 2, 0, full + full), int(b + 3, 0, full + full)
      elseif op == 'e' then -- the actual cost, then the hold's estimate and deadline (digits, kept as text)
        cost, wait, ath = int(b + 1, 0, 1000000000000), int(b + 2, 0, cap), ARGV[b + 3]
        if not string.find(ath, '^[1-9]%d*$') or #ath > 19 then error({err = 'RBARG argument ' .. (b + 3) .. ' (' .. ath .. ') not a time'}) end
      else
        cost = per == 1 and 1 or tonumber(ARGV[b + 1])
        if not cost or cost % 1 ~= 0 or cost < 0 or cost > cap then int(b + 1, 0, cap) end
        if per == 3 then wait = int(b + 2, op == 'h' and 1 or 0, op == 'h' and 86400000000 or 9007199254740991) end -- maxWait, a hold's ttl
        if op == 'i' and cost ~= 0 then error({err = 'RBARG inspect takes cost 0'}) end
      end

      -- Read the key (WIRE.md, "Stored values"): d0, t0 (0, 0 when absent), the policy that wrote it
      -- (fc, fu, fr) when not the call's, or why it is corrupt (kind, why).
      local d0, t0, kind, why, fc, fu, fr = 0, 0
      local v, u, c, n = redis.pcall('GET', key)
      exists = v ~= false
      if not v then -- absent
      elseif type(v) ~= 'string' then
        kind, why = 1, 'holds a ' .. call('TYPE', key)['ok']
      elseif clock == 's' then
        if #v <= 15 and string.find(v, '^%d+$') then -- d*10^5 + u*100 + n, below 2^53
          local x = v + 0
          n, u, d0 = x % 100, (x % 100000 - x % 100) / 100, (x - x % 100000) / 100000
        elseif #v <= 19 and string.find(v, '^%d+$') and (#v < 19 or v <= '9223372036854775807') then
          d0, n = string.sub(v, 1, -6) + 0, string.sub(v, -5) + 0 -- the same, in two parts
          u, n = (n - n % 100) / 100, n % 100
        elseif string.byte(v) == 61 then -- "=d:u:capacity:unit:refill", the long form
          d0, u, c = string.match(v, '^=(%d+):(%d%d?%d?):(.*)$')
        elseif string.find(v, ':', 1, true) then
          kind, why = 2, 'was written with a client clock'
        else
          d0 = nil
        end
      else -- "d:t:capacity:unit:refill"
        d0, t0, c = string.match(v, '^(%d+):(%d+):(.*)$')
        if not d0 and (not string.find(v, ':', 1, true) or string.byte(v) == 61) then
          kind, why = 2, 'was written with the server clock'
        end
        t0 = t0 and #t0 <= 17 and t0 + 0
      end
      if v and not kind then
        if c then fc, fu, fr = policy(c) end
        if n and n ~= num then -- another number: its policy, or (the registry lost) none
          local s = call('HGET', registry, n)
          if s then fc, fu, fr = policy(s) end
        end
        if type(d0) == 'string' then -- above 2^53 the conversion would round: corrupt
          d0 = (#d0 < 16 or (#d0 == 16 and d0 <= '9007199254740992')) and d0 + 0
        end
        if not d0 or (c and not fc) or (clock == 'c' and (not t0 or t0 > (fu == 0 and 9010050454740991 or 9007199254740991))) then
          kind, why = 3, 'holds ' .. v
        end
      end
      if v and not kind then
        if fc == cap and fu == unit and fr == refill then fc = nil end
        if fc and (fu == 0) ~= (unit == 0) then -- a quota's value for a bucket, or a bucket's for a quota
          d0, t0 = 0, 0 -- no common measure: a quota without count, or a full bucket
          if unit > 0 then t0 = now end
        elseif clock == 's' then -- the stamp, from the expiry
          local e = call('PEXPIRETIME', key)
          if unit == 0 then -- a quota's period ends at its expiry, at most algo's maxQuotaEnd
            t0 = e * 1000
            if e < 0 or t0 > 9010050454740991 then kind = 4 end
          else -- t = E*1000 - ceil(d/refill) - u, under the refill of the policy that wrote it, in parts
            local q = ceildiv(d0, fr or refill)
            local ql = q % 1000
            if q > 4503599627370496 then ql = math.fmod(q, 1000) end
            t0 = (e - (q - ql) / 1000) * 1000 - (ql + u) -- E*1000, a multiple of 8, is exact below 2^56
            if e < 0 or t0 < 0 or t0 > 9007199254740991 then kind = 4 end
          end
          if kind then why = 'holds ' .. v .. ' with expiry ' .. e end
        end
      end

      -- quotaend returns the end (µs) of the period holding time x of the quota of refill r: algo's periodDays
      -- on whole seconds (months by Hinnant's civil_from_days; (a - a % m) / m is floor(a/m) here).
      local quotaend
      if unit == 0 then
        quotaend = function(x, r)
          local kindof = -r % 4
          local off = (-r - kindof) / 4 - 86399
          local dn = (x - math.fmod(x, 1000000)) / 1000000 + off + 86400
          dn = (dn - dn % 86400) / 86400 - 1 -- the calendar's day, >= -1
          local e = dn + 1
          if kindof == 2 then
            e = dn - (dn + 3) % 7 + 7 -- day 4, 1970-01-05, was a Monday
          elseif kindof == 3 then
            local z = dn + 719468
            local doe = z % 146097 -- the day of the 400-year era
            local yoe = doe - (doe - doe % 1460) / 1460 + (doe - doe % 36524) / 36524 - (doe - doe % 146096) / 146096
            yoe = (yoe - yoe % 365) / 365
            local doy = doe - (365 * yoe + (yoe - yoe % 4) / 4 - (yoe - yoe % 100) / 100)
            local mp = (5 * doy + 2 - (5 * doy + 2) % 153) / 153
            local day = doy - (153 * mp + 2 - (153 * mp + 2) % 5) / 5 + 1
            local y, m, len = yoe + (z - doe) / 146097 * 400, mp + 3, 31
            if mp >= 10 then y, m = y + 1, mp - 9 end
            if m == 2 then len = (y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0)) and 29 or 28 end
            if m == 4 or m == 6 or m == 9 or m == 11 then len = 30 end
            e = dn - day + 1 + len
          end
          return (e * 86400 - off) * 1000000
        end
      end

      -- A corrupt key is repaired (an empty bucket stamped now, or the
      -- quota's period of now spent), or with keep (and on inspect) fails.
      if kind then
        if keep then error({err = 'RBCORRUPT key ' .. key .. ' ' .. why .. ': not a ratebucket bucket; Reset (DEL) it'}) end
        fc = nil
        if unit == 0 then d0, t0 = cap, quotaend(now, refill) else d0, t0 = full, now end
        repaired = repaired or {}
        repaired[#repaired + 1], repaired[#repaired + 2] = i, kind
      end

      -- A key of another policy (fc, fu, fr) is converted as algo's Rebase (WIRE.md, "Policy changes"), by
      -- muldiv: floor(a*m/c) (at most 2^53) and whether it is exact, for a, m, c <= 2^52, c >= 1, the
      -- product in 26-bit limbs divided a bit at a time (2r + 1 < 2^53).
      local conv = fc ~= nil
      if conv then
        local function muldiv(a, m, c)
          local T, fmod = 67108864, math.fmod
          local a0, m0 = fmod(a, T), fmod(m, T)
          local a1, m1 = (a - a0) / T, (m - m0) / T
          local p0, p1, p2 = a0 * m0, a1 * m0 + a0 * m1, a1 * m1 -- each below 2^53
          local l0 = fmod(p0, T)
          p1 = p1 + (p0 - l0) / T
          local l1 = fmod(p1, T)
          p2 = p2 + (p1 - l1) / T
          local l2 = fmod(p2, T)
          local limbs, q, r = {(p2 - l2) / T, l2, l1, l0}, 0, 0
          for j = 1, 4 do
            local x = limbs[j]
            for k = j == 1 and 27 or 25, 0, -1 do -- the top limb is below 2^27
              local bit = 0
              if x >= 2 ^ k then bit, x = 1, x - 2 ^ k end
              r, q = r + r + bit, q + q
              if r >= c then q, r = q + 1, r - c end
              if q > 9007199254740992 then return 9007199254740992, false end
            end
          end
          return q, r == 0
        end
        if unit == 0 then
          -- A quota of the same calendar, its period running, keeps its count
          -- (at most both capacities; "q": scaled, rounded up); else afresh.
          if fu == 0 and fr == refill and now < t0 and d0 > 0 then
            if d0 > fc then d0 = fc end
            if proportional then
              local x, exact = muldiv(d0, cap, fc)
              d0 = exact and x or x + 1
            end
            if d0 > cap then d0 = cap end
          else
            d0, t0 = 0, 0
          end
        elseif fu > 0 then -- (a quota's value read as a full bucket: 0, now)
          -- Refilled under its policy: tokens ("q": the fraction) kept rounded
          -- down, at most full; debt rounded up, at most one bucket.
          local ffull, x = fc * fu, d0
          if x > ffull + ffull then x = ffull + ffull end
          if now > t0 then
            if x > 0 and now - t0 >= ceildiv(x, fr) then x = 0 elseif x > 0 then x = x - (now - t0) * fr end
            t0 = now
          end
          local m, c = unit, fu
          if proportional then m, c = full, ffull end
          if x == 0 then -- a full bucket stays full
            d0 = 0
          elseif x <= ffull then
            d0 = full - math.min(muldiv(ffull - x, m, c), full)
          else
            local y, exact = muldiv(x - ffull, m, c)
            d0 = full + math.min(exact and y or y + 1, full)
          end
        end
      end

      -- sum returns a + b (a time and a duration <= 2^53), past 2^53 as its
      -- digits; built only when t0 > now or now > 2^52 (else t + b < 2^53).
      if not sum and (t0 > now or now > 4503599627370496) then
        sum = function(a, b)
          if a <= 9007199254740992 - b then return a + b end
          local al, bl = math.fmod(a, 1000000), math.fmod(b, 1000000)
          local hi, lo = (a - al) / 1000000 + (b - bl) / 1000000, al + bl
          if lo >= 1000000 then hi, lo = hi + 1, lo - 1000000 end
          big = true return string.format('%d%06d', hi, lo) -- (a reply field in digits)
        end
      end

      -- The decision, algo's steps, to the reply (extra: the op's fields);
      -- charged: a charge, or what a refund, cancel or settle gives back.
      local ok, rem, retry, reset, charged, extra = 1, 0, 0, 0
      d, t = d0, t0
      if unit == 0 then
        -- A quota (algo's takeQuota, refundQuota; WIRE.md "Calendar quotas").
        if d > cap then d = cap end
        if now >= t then d, t = 0, quotaend(now, refill) end
        if op == 'r' then
          d = math.max(d - cost, 0)
        elseif d <= cap - cost then
          d = d + cost
        else
          ok, retry = 0, t - now
        end
        if d > 0 then reset = t - now else t = 0 end
        rem, charged = cap - d, ok == 1 and cost > 0
        if op == 'r' then charged = exists and cost > 0 end
      else
        -- 1. Time never runs backwards. 2. The deficit, at most two full
        -- buckets, refills ((now - t)*refill formed only below d + refill).
        if d > full + full then d = full + full end
        if now > t then
          if d > 0 and now - t >= ceildiv(d, refill) then d = 0 elseif d > 0 then d = d - (now - t) * refill end
          t = now
        end
        local need = cost * unit
        if taking then -- 3. admit and charge (a peek always), or 4. deny with the exact wait
          if d <= full - need then
            d, charged = d + need, need > 0
          elseif need > 0 or op == 'h' then -- (a hold of 0 is refused in debt)
            ok, retry = 0, ceildiv(d - full + need, refill)
          end
          if op == 'h' then -- an admitted hold's record, expiring at its deadline t + ttl (WIRE.md "Holds")
            local due, tl = ok == 1 and (sum and sum(t, wait) or t + wait) or 0, math.fmod(t, 1000)
            if ok == 1 then
              local ms = clock == 's' and (t - tl) / 1000 + ceildiv(tl + wait, 1000) or ceildiv(t - now + wait, 1000) + math.max(margin, 0)
              call('SET', hold, string.format('%d:%s:%s', cost, type(due) == 'string' and due or string.format('%d', due), ps), clock == 's' and 'PXAT' or 'PX', string.format('%d', ms))
            end
            extra = {due}
          end
        elseif op == 'r' then -- the deficit less n*unit, never below 0
          d, charged = math.max(d - need, 0), exists and cost > 0
        elseif op == 'e' then -- settle (cost: the actual, wait: the estimate, ath: the deadline; WIRE.md "Holds")
          local st, left, rec, dl = 0, 0, redis.pcall('GET', hold), tonumber(ath)
          if dl < 9007199254740992 and t > dl then st = 2 elseif not rec then st = 1
          elseif rec ~= string.format('%d:%s:%s', wait, ath, ps) then st = 3 else -- the record goes: the difference back, or the extra up to 2*full
            call('DEL', hold)
            local d1, room = d, full + full - d
            if cost <= wait then d = math.max(d - (wait - cost) * unit, 0) else
              local c = math.min(cost - wait, (room - math.fmod(room, unit)) / unit)
              d, left = d + c * unit, cost - wait - c
            end
            charged = d ~= d1
          end
          extra = {st, left}
        elseif op == 'a' then -- grant min(n, whole tokens held); none for n > 0 is a denied take of 1
          local g = 0
          if d < full then g = (full - d - (full - d) % unit) / unit end
          rem, g = g - math.min(g, cost), math.min(g, cost)
          if g > 0 then
            d = d + g * unit
          elseif cost > 0 then
            ok, retry = 0, ceildiv(d - full + unit, refill)
          end
          charged, extra = g > 0, {g}
        elseif op == 'v' then
          -- Reserve: a take when it fits, else admitted at t + w, w <=
          -- min(maxWait, floor(full/refill)) (WIRE.md, "The script").
          local delay, due, give, left = 0, 0, 0, 0
          if need == 0 or d <= full - need then
            d = d + need
          else
            local w = ceildiv(d - full + need, refill)
            local limit = math.min(wait, (full - full % refill) / refill)
            if w > limit then
              ok, retry = 0, w - limit
            else
              local from = math.max(d, w * refill) -- the refill past full in the last µs spills
              delay, due, give, left = w, sum and sum(t, w) or t + w, from - d + need, from - w * refill + need
              d = from + need
            end
          end
          charged, extra = ok == 1 and need > 0, {delay, due, give, left}
        elseif op == 'x' then
          -- Cancel: Units back while the reservation waits and is the last.
          local tl = math.fmod(t, 1000000)
          local due = (ath - (t - tl) / 1000000) * 1000000 + (atl - tl) -- At - t, in parts
          charged = units > 0 and due > 0 and due <= (full - full % refill) / refill + 1 and d - due * refill == mark
          if charged then d = math.max(d - units, 0) end
          extra = {charged and 1 or 0}
        end
        if op ~= 'a' and d < full then rem = (full - d - (full - d) % unit) / unit end
        if d > 0 then reset = ceildiv(d, refill) end
        if sum then -- retry-after and reset-after count from now, the decision from t
          if ok == 0 then retry = sum(t - now, retry) end
          if d > 0 then reset = sum(t - now, reset) end
        end
      end

      if ok == 0 then reply[2] = 0 end
      reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = ok, rem, retry, reset
      at = at + 4
      if extra then
        for j = 1, #extra do reply[at + j] = extra[j] end
        at = at + #extra
      end
      local changed = d ~= d0 or t ~= t0 or (unit > 0 and exists and d == 0 and t == now) -- (a client clock's write: a full bucket is deleted)
      if op == 'i' then
        reply[at + 1], reply[at + 2], reply[at + 3] = d0, t0, call('PTTL', key)
        at = at + 3
      elseif op == 'm' then
        pend = pend or {}
        pend[i] = {d, t, exists, cap, unit, refill, num, ok, charged, changed, kind, conv, d0, t0}
      else
        -- Each key alone: the server clock writes a charge; a client clock a change (memstore's), a refund,
        -- cancel or settle only what it gives back; a repaired or converted key always (WIRE.md, "Stored values").
        writes = charged
        if clock ~= 's' and op ~= 'r' and op ~= 'x' and op ~= 'e' then writes = changed end
        writes = writes or kind or conv
      end
    end

    -- Write (d, t) (WIRE.md, "Stored values"), or delete a key full at now.
    -- idle = t + ceil(d/refill) may pass 2^53: formed in parts about 1000.
    if writes then
      local q, ql, tl, c, ms = 0, 0, 0, 0, t / 1000
      if unit > 0 then
        q = ceildiv(d, refill)
        ql, tl = q % 1000, t % 1000
        if q > 4503599627370496 then ql = math.fmod(q, 1000) end
        if t > 4503599627370496 then tl = math.fmod(t, 1000) end
        c = ceildiv(tl + ql, 1000)
        ms = (t - tl) / 1000 + (q - ql) / 1000 + c
      end
      if (unit == 0 and d == 0) or (unit > 0 and q <= now - t) then
        if exists then call('DEL', key) end
      elseif clock == 's' then
        local u, v = unit > 0 and c * 1000 - (tl + ql) or 0
        if num and d < 90071992547 then
          v = string.format('%d', d * 100000 + u * 100 + num)
        elseif num and d < 92233720368547 then
          v = string.format('%d%05d', d, u * 100 + num)
        else
          v = string.format('=%d:%d:%d:%d:%d', d, u, cap, unit, refill)
        end
        call('SET', key, v, 'PXAT', string.format('%d', ms))
      else
        local v = string.format('%d:%d:%d:%d:%d', d, t, cap, unit, refill)
        if margin < 0 then
          call('SET', key, v)
        else -- ceil((idle - now)/1000) = ceil((t - now + q)/1000), in parts
          local a = t - now
          local al = math.fmod(a, 1000)
          call('SET', key, v, 'PX', string.format('%d', (a - al) / 1000 + (q - ql) / 1000 + ceildiv(al + ql, 1000) + margin))
        end
      end
    end
  end
end

for j = 1, repaired and #repaired or 0 do reply[at + j] = repaired[j] end
-- The reply, packed (WIRE.md, "The script"); with big, a sum past 2^53 (hi*10^6 + lo) in 32-bit halves.
if not big then return struct.pack(#reply > 34 and string.rep('>i8', #reply) or string.sub(I8, 1, 2 * #reply + 1), unpack(reply)) end
local f, out = {}, {}
for j = 1, #reply do
  local x, h = reply[j]
  if type(x) == 'string' then
    x, h = string.sub(x, 1, -7) * 15625, string.sub(x, -6) + 0 -- hi*10^6 + lo = hi*15625*64 + lo
    h, x = (x - x % 67108864) / 67108864, x % 67108864 * 64 + h
    if x >= 4294967296 then h, x = h + 1, x - 4294967296 end out[#out + 1] = h
  end
  f[j], out[#out + 1] = h and 'I4I4' or 'i8', x
end
return struct.pack('>' .. table.concat(f), unpack(out))
