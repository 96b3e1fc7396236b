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
-- KEYS[4] flow hash
-- ARGV[1] queue prefix  ARGV[2] URLs counted at most by this call
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
while counted < budget do
  local domains = redis.call('ZRANGE', KEYS[1], 0, 99)
  if #domains == 0 then break end
  for _, d in ipairs(domains) do
    local q = ARGV[1] .. d
    local n = redis.call('LLEN', q)
    local take = math.min(n, budget - counted)
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
