-- A cancelled crawl's pending URLs of one partition counted final in bulk, unfetched (issue 50):
-- a cancel is a state change, not a crawl of its own. Run by the dispatchers while the crawl
-- is cancelling, each call bounded (ARGV[2] entries at most, so Redis is never held long and
-- another crawl's releases go on between two calls); no URL is handed out, written or
-- recorded one by one. Dropped URLs get no line in the output: they are counted as done and
-- cancelled (stats.py shows done without them) and as final in the partition's flow, once,
-- as the queue entry or retry member that held them goes in the same step.
-- Nothing is released once the crawl is cancelled (release.lua reads the flag's copy in the
-- flow hash), so only URLs in flight (start.lua stops them as cancelled) and those that come
-- back (a retry, a lost message taken back) can reach the frontier after this: they are
-- counted by a later call.
-- All keys are the partition's.
-- KEYS[1] ready (domains with a non-empty queue)  KEYS[2] stats  KEYS[3] retry zset
-- KEYS[4] flow hash  KEYS[5] low set  KEYS[6] flush zset  KEYS[7] spilled hash (state/tails.py)
-- ARGV[1] queue prefix  ARGV[2] URLs counted at most by this call
-- ARGV[3] spill buffer prefix  ARGV[4] chunk index prefix
-- A domain with a tail (a spill buffer or chunks: tails_lib.lua) goes whole, head and tail, in
-- one step (the budget is then a bound only between domains); its chunks' ids go with it, the
-- chunks themselves stay in the store (no I/O here) and are never read.
-- Returns {URLs counted now, URLs of the partition still outstanding (in - out)}.
local budget = tonumber(ARGV[2])
local counted, queued = 0, 0

-- URLs waiting out a retry's back-off (not counted as queued: release.lua counts them in when
-- they are due).
local waiting = redis.call('ZCARD', KEYS[3])
if waiting > 0 then
  local n = math.min(waiting, budget)
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, n - 1)
  counted = n
end

-- Whole queues go at once (DEL); the last one reached only in part (LTRIM keeps its tail for
-- the next call). A domain listed with an empty queue is taken off the list, so each pass
-- makes progress.
-- Domain d's URLs beyond its head, all of them dropped now; 0 (nothing done) if it has none.
local function drop_tail(d)
  local sp, ix = ARGV[3] .. d, ARGV[4] .. d
  -- Off the sets first: a domain listed there is never looked at twice (each pass progresses).
  redis.call('SREM', KEYS[5], d)
  redis.call('ZREM', KEYS[6], d)
  local n = redis.call('LLEN', sp) + (tonumber(redis.call('HGET', KEYS[7], d)) or 0)
  if n > 0 then
    redis.call('DEL', sp, ix)
    redis.call('HDEL', KEYS[7], d)
  end
  return n
end

while counted < budget do
  -- Domains whose head is empty and whose chunks wait for a refill are in the low set only.
  local domains = redis.call('ZRANGE', KEYS[1], 0, 99)
  for _, d in ipairs(redis.call('SRANDMEMBER', KEYS[5], 100)) do domains[#domains + 1] = d end
  if #domains == 0 then break end
  for _, d in ipairs(domains) do
    local q = ARGV[1] .. d
    local tail = drop_tail(d)
    local n = redis.call('LLEN', q)
    local take = math.min(n, budget - counted)
    if tail > 0 then
      take = n
      counted, queued = counted + tail, queued + tail
    end
    if take == n then
      redis.call('DEL', q)
      redis.call('ZREM', KEYS[1], d)
    else
      redis.call('LTRIM', q, take, -1)
    end
    counted, queued = counted + take, queued + take
    if counted >= budget then break end
  end
end

if counted > 0 then
  if queued > 0 then redis.call('HINCRBY', KEYS[2], 'queued', -queued) end
  redis.call('HINCRBY', KEYS[2], 'done', counted)
  redis.call('HINCRBY', KEYS[2], 'cancelled', counted)
  redis.call('HINCRBY', KEYS[4], 'out', counted)
end
local flow = redis.call('HMGET', KEYS[4], 'in', 'out')
return {counted, (tonumber(flow[1]) or 0) - (tonumber(flow[2]) or 0)}
