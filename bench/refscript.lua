-- The reference hash script: the token bucket of the reference article
-- ("Token Bucket in 70 lines of Node.js with a Lua script on Redis"): a hash
-- with fields tokens and ts, refilled in floating point, EXPIRE of the fill
-- time plus one hour. Copied unchanged below this header as a comparison point.
--
-- KEYS[1] = bucket key (مثل: rl:user:123)
-- ARGV[1] = capacity (السعة القصوى، مثلاً 100)
-- ARGV[2] = refill_rate per second (مثلاً 2)
-- ARGV[3] = now in milliseconds
-- ARGV[4] = cost للـ request الحالية (عادة 1)

local capacity = tonumber(ARGV[1])
local refill_rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

local data = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(data[1])
local ts = tonumber(data[2])

-- لو الـ bucket مفيهوش بيانات، اعتبره ممتلي
if tokens == nil then
  tokens = capacity
  ts = now
end

-- احسب الـ tokens اللي اتولدت من آخر مرة
local elapsed_ms = math.max(0, now - ts)
local refilled = (elapsed_ms / 1000) * refill_rate
tokens = math.min(capacity, tokens + refilled)

local allowed = 0
local retry_after_ms = 0

if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  retry_after_ms = math.ceil((cost - tokens) / refill_rate * 1000)
end

redis.call('HMSET', KEYS[1], 'tokens', tokens, 'ts', now)

-- TTL = الوقت اللي بياخده الـ bucket عشان يمتلئ بالكامل + ساعة margin
local ttl = math.ceil(capacity / refill_rate) + 3600
redis.call('EXPIRE', KEYS[1], ttl)

return { allowed, math.floor(tokens), retry_after_ms }
