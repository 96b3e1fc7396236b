-- Release fetch work of one partition of a crawl from the frontier: called every few tens of
-- milliseconds by the dispatcher inside every worker; atomic, so any number of dispatchers may
-- run at once.
-- Politeness is decided here, on Redis's clock (TIME), for the whole cluster:
--   * a per-domain rate as a GCRA token bucket ("tat" = theoretical arrival time; a request
--     may go when now >= tat - slack, slack = burst x interval, so an idle domain takes
--     1 + burst requests at once and then one per interval)
--   * a per-domain concurrency limit as leases that expire (a dead worker frees its slot)
--   * not_before (Retry-After), crawl-delay and an adaptive slow-down factor
-- The bucket is charged here, at release (nothing is published before its token, so no task
-- waits for one), and again by done.lua from when the request was really sent (tat >= sent
-- + interval), so a queueing delay between this release and the HTTP request cannot bunch
-- two requests up; done.lua also charges robots.txt fetches ("extra") and adapts the pace.
-- Crawl-delay is a minimum gap between requests: when it sets the interval there is no burst.
-- The interval used, its burst slack and whether the crawl's owner set the rate are stored in
-- the domain's hash ("iv", "sl", "own") for done.lua and the send gate (gate_lib.lua).
-- A domain is in the ready zset exactly while its head or its spill buffer is non-empty
-- (tails_lib.lua, prepended); its score is the earliest time anything can change for it (next
-- token, next lease expiry, Retry-After). A head below its low-water mark is topped up from
-- the buffer when no chunk comes first; else its domain goes to the low set, for a dispatcher
-- to refill from its next chunk (refill.lua puts it back in the ready zset).
--
-- Every key is one partition's (one hash slot, so this runs on a Redis Cluster too): the
-- dispatcher calls it once per partition. What is not the partition's arrives as arguments:
-- the crawl's state (read by the dispatcher each round), the owner's rates (from the crawl's
-- options) and the cluster-wide rates of `crawler set-rate`.
-- KEYS[1] ready  KEYS[2] inflight  KEYS[3] stats
-- KEYS[4] retry zset ("domain<TAB>depth|url" scored by when the retry is due)
-- KEYS[5] the partition's flow hash: its copies of the crawl's paused and cancelled flags
--         ("paused", "cancelled" = 1) are read here, atomically with the release, so nothing
--         is released once pause() or cancel() has returned (the dispatcher's steering
--         argument may have been read just before it)
-- KEYS[6] the low set (domains whose head is to be refilled from a chunk)
-- ARGV (built by calls.ReleaseCall):
-- ARGV[1] max domains per call  ARGV[2] queue prefix  ARGV[3] lease prefix
-- ARGV[4] domain-state prefix   ARGV[5] lease seconds  ARGV[6] default rate (req/s)
-- ARGV[7] burst  ARGV[8] concurrency per domain
-- ARGV[9] id of the releasing worker process (formats.Inflight stage "r", without ARGV[14])
-- ARGV[10] max entries released (what the fetch pools can start now; the dispatcher's budget)
-- ARGV[11] cluster-wide rates, "domain<TAB>req/s" pairs joined by tabs ("" = none)
-- ARGV[12] the crawl owner's rates, the same way
-- ARGV[13] the crawl's steering (formats.Steering): "run", "paused" or "cancelled"
-- ARGV[14] live fetch processes that have a direct queue, tab-joined ("" = none): a released
--          URL is marked as held by its host's process among them (the dispatcher publishes
--          it to that process's queue, which keeps the host's connections), so that URL goes
--          back to the frontier as soon as that process stops beating (reclaim), its message
--          with it. Rendezvous hashing: the process with the greatest sha1(process TAB host);
--          workers.holder computes the same in Python. A process joining or leaving moves
--          only the hosts it wins or held.
-- ARGV[15] seconds between two requests to one server address (state/pacing.py: ip_rate
--          split over the partitions), 0 = none
-- ARGV[16] requests in flight per server address (ip_concurrency, split the same way), 0 = none
--          With either set, a domain is grouped by its address ("ip" in its hash, until
--          "ip_until", unless "ipx" = 1: exempt, or "?": unresolved): the address's bucket
--          (P:{C/N}:ip:A, "tat", no burst) and leases (ipl:A, URLs by expiry) are taken with
--          the domain's, and a domain that waits for a lease of its address is noted in
--          ipw:A (done.lua wakes them when one is returned).
-- ARGV[17] the partition's address key prefix ("P:{C/N}:ip": the keys are prefix .. ":" .. A,
--          prefix .. "l:" .. A and prefix .. "w:" .. A)
-- ARGV[18..24] the heads and tails (tails_lib.lua tails_args)   ARGV[25] 1 = depth-first
-- AutoThrottle: a domain's "at" (done.lua's delay from its latency) raises its interval (no
-- burst then); "piv" stores the interval before it (done.lua's lower bound).
-- Returns {"fetch", domain1, entry1, domain2, entry2, ...}. A cancelled crawl releases
-- nothing: its pending URLs are counted cancelled in bulk by cancel.lua.
-- An empty entry asks for the domain's address (grouped, unknown or expired): nothing of it is
-- released until the dispatcher has resolved it (address.lua wakes it).

local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local limit, qprefix, lprefix, dprefix = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local lease_s, default_rate = tonumber(ARGV[5]), tonumber(ARGV[6])
local burst, conc = tonumber(ARGV[7]), tonumber(ARGV[8])
local budget = tonumber(ARGV[10]) or math.huge
local T, dfs = tails_args(18), ARGV[25] == '1'

-- Domain d's head (q: its key, pending: its length) topped up when below its low-water mark
-- (half its size): from its buffer when no chunk comes before it, else d is marked for a
-- refill. Returns the head's new length.
local function top_up(d, q, pending)
  local head = head_size(T, d)
  if pending >= math.ceil(head / 2) then return pending end
  local sp = T.sprefix .. d
  local buffered = redis.call('LLEN', sp)
  if redis.call('LLEN', T.iprefix .. d) > 0 and (buffered == 0 or not dfs) then
    redis.call('SADD', KEYS[6], d)
    return pending
  end
  if buffered == 0 then return pending end
  -- At most 1,000 entries a move: a head of the rule can be hundreds of entries.
  local moved = redis.call('LPOP', sp, math.max(1, math.min(head - pending, 1000)))
  if not moved then return pending end
  redis.call('RPUSH', q, unpack(moved))
  return pending + #moved
end

-- "d1<TAB>r1<TAB>d2<TAB>r2" -> {d1 = r1, d2 = r2}
local function pairs_of(text)
  local out, d = {}, nil
  for field in string.gmatch(text or '', '[^\t]+') do
    if d == nil then d = field else out[d] = field; d = nil end
  end
  return out
end
local cluster_rates, owner_rates = pairs_of(ARGV[11]), pairs_of(ARGV[12])
local holders = {}
for p in string.gmatch(ARGV[14] or '', '[^\t]+') do holders[#holders + 1] = p end

-- The process a released URL of domain d is held by: its host's, else the releasing one.
local function holder(d)
  local best, top = ARGV[9], ''
  for _, p in ipairs(holders) do
    local h = redis.sha1hex(p .. '\t' .. d)
    if h > top then best, top = p, h end
  end
  return best
end

-- The retry members of up to ``n`` that are due back to the head of their domain's queue.
local function requeue_retries(n)
  local members = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, n)
  for _, m in ipairs(members) do
    local tab = string.find(m, '\t', 1, true)
    local d = string.sub(m, 1, tab - 1)
    redis.call('LPUSH', qprefix .. d, string.sub(m, tab + 1))
    redis.call('ZADD', KEYS[1], 'NX', now, d)
    redis.call('ZREM', KEYS[4], m)
  end
  if #members > 0 then redis.call('HINCRBY', KEYS[3], 'queued', #members) end
end

-- Paused or cancelled: nothing is released (a cancelled crawl's frontier is counted by
-- cancel.lua). The flow hash's copies are read too: a dispatcher may have read the crawl's
-- steering just before pause() or cancel() returned.
local flags = redis.call('HMGET', KEYS[5], 'paused', 'cancelled')
if ARGV[13] ~= 'run' or flags[1] == '1' or flags[2] == '1' then
  return {'fetch'}
end

-- Retries that are due go back to the head of their domain's queue, so they too wait for the
-- domain's token, lease and Retry-After.
requeue_retries(limit)

-- (seconds between two requests to domain d (0 = unlimited), burst slack in seconds, 1 if the
-- crawl's owner set d's rate else 0).
local function pace(d, delay, slow)
  local own = owner_rates[d]
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

-- Seconds: a token due within this of now counts as there (its host waits for a lease):
-- about what a page's parse, admission and record hold a lease on a busy process.
local AWAIT_S = 0.05
local ip_iv, ip_conc, aprefix = tonumber(ARGV[15]) or 0, tonumber(ARGV[16]) or 0, ARGV[17]
local grouped = ip_iv > 0 or ip_conc > 0
local out = {'fetch'}
local released = 0

-- The address group of a domain whose hash fields are f (HMGET below): its address, or nil
-- (not grouped); false when it must be resolved first.
local function address(f)
  if not grouped then return nil end
  if not f[6] or (tonumber(f[7]) or 0) < now then return false end
  if f[6] == '?' or f[8] == '1' then return nil end
  return f[6]
end

-- The state of address a's bucket and leases: {tat, in use, leases key}.
local function group(a)
  local g = {tat = now, inuse = 0, leases = aprefix .. 'l:' .. a}
  g.tat = tonumber(redis.call('HGET', aprefix .. ':' .. a, 'tat')) or now
  if ip_conc > 0 then
    redis.call('ZREMRANGEBYSCORE', g.leases, '-inf', now)
    g.inuse = redis.call('ZCARD', g.leases)
  end
  return g
end

local function release_domain(d)
  local q, lease, dom = qprefix .. d, lprefix .. d, dprefix .. d
  local pending = top_up(d, q, redis.call('LLEN', q))
  if pending == 0 then
    redis.call('ZREM', KEYS[1], d)
    return
  end
  local f = redis.call('HMGET', dom, 'delay', 'slow', 'not_before', 'tat', 'at', 'ip', 'ip_until', 'ipx')
  local a = address(f)
  if a == false then
    -- Asked for; address.lua wakes it once resolved (this score is the bound if it is not).
    out[#out + 1] = d; out[#out + 1] = ''
    redis.call('ZADD', KEYS[1], now + 5, d)
    return
  end
  local g = a and group(a)
  redis.call('ZREMRANGEBYSCORE', lease, '-inf', now)
  local inuse = redis.call('ZCARD', lease)
  local slow = tonumber(f[2]) or 1
  local interval, slack, own = pace(d, tonumber(f[1]) or 0, slow)
  local piv, at = interval, tonumber(f[5]) or 0
  if at > interval then interval, slack = at, 0 end
  local nb, tat = tonumber(f[3]) or 0, tonumber(f[4]) or now
  -- The bucket does not refill during a Retry-After: one request at not_before, then the pace.
  if nb > 0 then tat = math.max(tat, nb + slack) end
  local function group_free()
    return not g or ((ip_conc == 0 or g.inuse < ip_conc) and now >= g.tat)
  end
  if now >= nb then
    local by = nil
    while inuse < conc and pending > 0 and now >= tat - slack and released < budget and group_free() do
      local e = redis.call('LPOP', q)
      local url = string.sub(e, string.find(e, '|', 1, true) + 1)
      redis.call('ZADD', lease, now + lease_s, url)
      -- "domain|released at|depth|r:worker" (formats.Inflight): enough to publish it again.
      by = by or holder(d)
      redis.call('HSET', KEYS[2], url, d .. '|' .. t[1] .. '|' .. string.sub(e, 1, string.find(e, '|', 1, true) - 1) .. '|r:' .. by)
      tat = math.max(tat, now) + interval
      if g then
        g.tat = math.max(g.tat, now) + ip_iv
        if ip_conc > 0 then
          redis.call('ZADD', g.leases, now + lease_s, url)
          g.inuse = g.inuse + 1
        end
      end
      inuse, pending, released = inuse + 1, pending - 1, released + 1
      out[#out + 1] = d; out[#out + 1] = e
    end
    -- "aw" 1: the host's next URL waits for a lease, not for its token (every slot taken,
    -- the token due within AWAIT_S): its fetches give the lease back as soon as their
    -- response is read, rather than with the page's finish, where their process has free
    -- threads (start.lua tells them; settle.py).
    local aw = (pending > 0 and inuse >= conc and tat - slack <= now + AWAIT_S) and '1' or '0'
    redis.call('HSET', dom, 'tat', string.format('%.6f', tat), 'iv', string.format('%.6f', interval),
               'piv', string.format('%.6f', piv), 'own', own, 'sl', string.format('%.6f', slack),
               'aw', aw)
    -- "iv": the address's send gate (gate_lib.lua) spaces its sends by the same interval.
    if g then
      redis.call('HSET', aprefix .. ':' .. a, 'tat', string.format('%.6f', g.tat),
                 'iv', string.format('%.6f', ip_iv))
    end
  end
  -- Emptied now: its buffer's next entries, when no chunk comes first (else it waits in the
  -- low set, out of the ready zset, until refill.lua puts it back).
  if pending == 0 then pending = top_up(d, q, 0) end
  if pending == 0 then
    redis.call('ZREM', KEYS[1], d)
  elseif now < nb then
    redis.call('ZADD', KEYS[1], nb, d)
  elseif inuse >= conc then
    -- Woken earlier by done.lua when a lease is returned; this is the dead-worker bound.
    local first = redis.call('ZRANGE', lease, 0, 0, 'WITHSCORES')
    redis.call('ZADD', KEYS[1], tonumber(first[2]) or now + lease_s, d)
  elseif g and ip_conc > 0 and g.inuse >= ip_conc then
    -- Woken by done.lua when its address's lease is returned; the same dead-worker bound.
    redis.call('SADD', aprefix .. 'w:' .. a, d)
    local first = redis.call('ZRANGE', g.leases, 0, 0, 'WITHSCORES')
    redis.call('ZADD', KEYS[1], tonumber(first[2]) or now + lease_s, d)
  else
    redis.call('ZADD', KEYS[1], math.max(now, tat - slack, g and g.tat or 0), d)
  end
end

for _, d in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)) do
  -- Domains not reached keep their score: the earliest-ready go first next round.
  if released >= budget then break end
  release_domain(d)
end
if released > 0 then redis.call('HINCRBY', KEYS[3], 'queued', -released) end
return out
