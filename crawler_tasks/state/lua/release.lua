-- Release fetch work of one crawl from the frontier: called every few tens of milliseconds by
-- the dispatcher inside every worker; atomic, so any number of dispatchers may run at once.
-- Politeness is decided here, on Redis's clock (TIME), for the whole cluster:
--   * a per-domain rate as a GCRA token bucket ("tat" = theoretical arrival time; a request
--     may go when now >= tat - slack, slack = burst x interval, so an idle domain takes
--     1 + burst requests at once and then one per interval)
--   * a per-domain concurrency limit as leases that expire (a dead worker frees its slot)
--   * not_before (Retry-After), crawl-delay and an adaptive slow-down factor
-- The bucket is charged here, at release (nothing is published before its token, so no task
-- waits for one); done.lua then paces the next request from the end of this one (tat >=
-- end + interval) and charges robots.txt fetches ("extra"), so a queueing delay between this
-- release and the HTTP request cannot bunch two requests up.
-- Crawl-delay is a minimum gap between requests: when it sets the interval there is no burst.
-- The interval used and whether the crawl's owner set the rate are stored in the domain's
-- hash ("iv", "own") for done.lua.
-- A domain is in the ready zset exactly while its queue is non-empty; its score is the
-- earliest time anything can change for it (next token, next lease expiry, Retry-After).
--
-- Every key is the crawl's own (one hash slot, so this runs on a Redis Cluster too): the
-- cluster-wide rates of `crawler set-rate` arrive as an argument, read by the dispatcher.
-- KEYS[1] ready  KEYS[2] inflight  KEYS[3] state  KEYS[4] crawl rate overrides (hash)
-- KEYS[5] stats  KEYS[6] retry zset ("domain<TAB>depth|url" scored by when the retry is due)
-- ARGV[1] max domains per call  ARGV[2] queue prefix  ARGV[3] lease prefix
-- ARGV[4] domain-state prefix   ARGV[5] lease seconds  ARGV[6] default rate (req/s)
-- ARGV[7] burst  ARGV[8] concurrency per domain  ARGV[9] max entries drained when cancelled
-- ARGV[10] id of the releasing worker process (formats.Inflight stage "r")
-- ARGV[11] max entries released (what the fetch pools can start now; the dispatcher's budget)
-- ARGV[12] cluster-wide rates, "domain<TAB>req/s" pairs joined by tabs ("" = none)
-- Returns {mode, domain1, entry1, domain2, entry2, ...}; mode is "fetch", or "cancel" when
-- the crawl was cancelled and the entries are drained without politeness (not to be fetched),
-- or "finishing" (no entries) when the crawl is empty and its finisher has not completed.

local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local state = redis.call('HMGET', KEYS[3], 'paused', 'cancelled', 'status')
-- Emptied, waiting for its finisher (finish.lua): nothing to release, the caller may help.
if state[3] == 'finishing' then return {'finishing'} end
local limit, qprefix, lprefix, dprefix = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local lease_s, default_rate = tonumber(ARGV[5]), tonumber(ARGV[6])
local burst, conc = tonumber(ARGV[7]), tonumber(ARGV[8])
local budget = tonumber(ARGV[11]) or math.huge
local cluster_rates = {}
if ARGV[12] and ARGV[12] ~= '' then
  local d = nil
  for field in string.gmatch(ARGV[12], '[^\t]+') do
    if d == nil then d = field else cluster_rates[d] = field; d = nil end
  end
end

if state[2] == '1' then
  -- Cancelled: hand pending entries back as in flight so they reach a final state.
  local out, budget = {'cancel'}, tonumber(ARGV[9])
  for _, d in ipairs(redis.call('ZRANGE', KEYS[1], 0, limit - 1)) do
    local entries = redis.call('LPOP', qprefix .. d, budget)
    if entries then
      for _, e in ipairs(entries) do
        redis.call('HSET', KEYS[2], string.sub(e, string.find(e, '|', 1, true) + 1), d .. '|0|0')
        out[#out + 1] = d; out[#out + 1] = e
      end
      budget = budget - #entries
    end
    if redis.call('LLEN', qprefix .. d) == 0 then redis.call('ZREM', KEYS[1], d) end
    if budget <= 0 then break end
  end
  -- Not when nothing was drained: -0 / 2 is "-0", which HINCRBY rejects as no integer.
  if #out > 1 then redis.call('HINCRBY', KEYS[5], 'queued', -(#out - 1) / 2) end
  return out
end
if state[1] == '1' then return {'fetch'} end

-- Retries that are due go back to the head of their domain's queue, so they too wait for the
-- domain's token, lease and Retry-After.
local due_retries = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, limit)
for _, m in ipairs(due_retries) do
  local tab = string.find(m, '\t', 1, true)
  local d = string.sub(m, 1, tab - 1)
  redis.call('LPUSH', qprefix .. d, string.sub(m, tab + 1))
  redis.call('ZADD', KEYS[1], 'NX', now, d)
  redis.call('ZREM', KEYS[6], m)
end
if #due_retries > 0 then redis.call('HINCRBY', KEYS[5], 'queued', #due_retries) end

-- (seconds between two requests to domain d (0 = unlimited), burst slack in seconds, 1 if the
-- crawl's owner set d's rate else 0).
local function pace(d, delay, slow)
  local own = redis.call('HGET', KEYS[4], d)
  if own then
    -- The crawl's owner named this host: its rate replaces both default and crawl-delay.
    if own == 'inf' then return 0, 0, 1 end
    local iv = slow / tonumber(own)
    return iv, burst * iv, 1
  end
  local rate = tonumber(cluster_rates[d] or default_rate)
  local base = 0
  if rate ~= nil and rate > 0 and rate ~= math.huge then base = 1 / rate end
  if delay > 0 and delay >= base then return delay * slow, 0, 0 end
  return base * slow, burst * base * slow, 0
end

local out = {'fetch'}
local released = 0
for _, d in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)) do
  -- Domains not reached keep their score: the earliest-ready go first next round.
  if released >= budget then break end
  local q, lease, dom = qprefix .. d, lprefix .. d, dprefix .. d
  local pending = redis.call('LLEN', q)
  if pending == 0 then
    redis.call('ZREM', KEYS[1], d)
  else
    redis.call('ZREMRANGEBYSCORE', lease, '-inf', now)
    local inuse = redis.call('ZCARD', lease)
    local f = redis.call('HMGET', dom, 'delay', 'slow', 'not_before', 'tat')
    local slow = tonumber(f[2]) or 1
    local interval, slack, own = pace(d, tonumber(f[1]) or 0, slow)
    local nb, tat = tonumber(f[3]) or 0, tonumber(f[4]) or now
    -- The bucket does not refill during a Retry-After: one request at not_before, then the pace.
    if nb > 0 then tat = math.max(tat, nb + slack) end
    if now >= nb then
      while inuse < conc and pending > 0 and now >= tat - slack and released < budget do
        local e = redis.call('LPOP', q)
        local url = string.sub(e, string.find(e, '|', 1, true) + 1)
        redis.call('ZADD', lease, now + lease_s, url)
        -- "domain|released at|depth|r:worker" (formats.Inflight): enough to publish it again.
        redis.call('HSET', KEYS[2], url, d .. '|' .. t[1] .. '|' .. string.sub(e, 1, string.find(e, '|', 1, true) - 1) .. '|r:' .. ARGV[10])
        tat = math.max(tat, now) + interval
        inuse, pending, released = inuse + 1, pending - 1, released + 1
        out[#out + 1] = d; out[#out + 1] = e
      end
      redis.call('HSET', dom, 'tat', string.format('%.6f', tat),
                 'iv', string.format('%.6f', interval), 'own', own)
    end
    if pending == 0 then
      redis.call('ZREM', KEYS[1], d)
    elseif now < nb then
      redis.call('ZADD', KEYS[1], nb, d)
    elseif inuse >= conc then
      -- Woken earlier by done.lua when a lease is returned; this is the dead-worker bound.
      local first = redis.call('ZRANGE', lease, 0, 0, 'WITHSCORES')
      redis.call('ZADD', KEYS[1], tonumber(first[2]) or now + lease_s, d)
    else
      redis.call('ZADD', KEYS[1], math.max(now, tat - slack), d)
    end
  end
end
if released > 0 then redis.call('HINCRBY', KEYS[5], 'queued', -released) end
return out
