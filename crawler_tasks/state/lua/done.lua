-- What happens to one request of domain d, on Redis's clock. release.lua charged the domain's
-- token bucket when it released the URL and stored the interval it used ("iv"; "own" = 1 when
-- the crawl's owner set the rate, which overrides Crawl-delay); these events complete that.
--
-- A request has ended (ok | throttle | error): return its lease and adapt the pace.
--   * ok, sent ARGV[7] seconds ago (>= 0): tat >= now - ARGV[7] + interval, the next
--     request is paced from when this one was sent (the next release needs this lease back,
--     so the sends of a domain form a GCRA sequence whatever the queueing delays).
--   * anything else, a send time unknown (-1), or a Crawl-delay learnt during this request
--     (its robots.txt was read first) longer than the interval it was released with:
--     tat >= now + interval, paced from the end: a host that struggles gets its full rest.
--   * ok: recover 20 % of the slow-down; throttle (429/503): halve the rate; error (timeout,
--     5xx): slow down by half again. The factor is capped at ARGV[5].
--   * ARGV[4]: Retry-After seconds (0 none): nothing is released before now + that.
--   * down (the host refused the connection or timed out connecting): a circuit breaker,
--     not a slow-down (an outage is not overload: a host that comes back is fetched at its
--     pace at once): from the 3rd consecutive "down" the host is closed for 5 s, then 10 s
--     between probes (not_before), so a host in an outage costs one probe per pause, not one
--     request per pending URL, and a host that is back is seen within ~10 s; "ok" closes the
--     circuit. The caller learns for how long the
--     host has been down (``down_since``), to spare its URLs' retry budgets meanwhile. Down
--     for ARGV[6] seconds or more, the host is declared dead for this crawl ("dead" = 1):
--     the caller fails its pending URLs at once (host_down) instead of probing for each.
-- extra: a request the release did not pay for (robots.txt) has ended: charge it as above,
--   plus one interval.
-- refund: the released request will not be sent (robots.txt disallows it): one interval is
--   given back (never more than the release took) and the lease returned without a charge.
-- KEYS[1] ready  KEYS[2] lease zset of d  KEYS[3] domain state hash  KEYS[4] queue of d
-- ARGV[1] url  ARGV[2] domain  ARGV[3] event  ARGV[4] seconds  ARGV[5] maximum slow-down
-- ARGV[6] seconds of outage after which a host is dead (max_host_outage)
-- ARGV[7] seconds since the request was sent, -1 unknown (ok only)
-- ARGV[8] the address the request went to ("" unknown)  ARGV[9] 1 if it is exempt (ip_exempt)
-- ARGV[10] seconds from send to headers (-1 unknown)  ARGV[11] 1 if the answer was a 2xx
-- ARGV[12] AutoThrottle's target concurrency (0: off)  ARGV[13] its maximum delay, seconds
-- ARGV[14] seconds an address is trusted  ARGV[15] the address key prefix (release.lua)
-- ARGV[16] seconds between two requests to one address (release.lua's ARGV[16])
-- Address (state/pacing.py): the lease of the domain's address is returned with the domain's
-- (the domains waiting for one are woken) and its bucket paced from the send like the
-- domain's; the address this request used is stored (ip, ip_until), for release.lua.
-- AutoThrottle: "at" moves half way to latency / target, within [piv, maximum]; an answer
-- that is not a 2xx may raise it, never lower it ("lat" keeps the latency, for status).
-- Returns "slow|seconds|dead": the slow-down factor; after "down" the seconds the host has
-- been down while its circuit is open (-1 when it is not); 1 if it was declared dead now.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local event, seconds = ARGV[3], tonumber(ARGV[4]) or 0
local f = redis.call('HMGET', KEYS[3], 'slow', 'tat', 'iv', 'own', 'delay', 'fails', 'down_since',
                    'ip', 'at', 'piv', 'ipx', 'sg')
-- The domain's fields this request changes, written in one HSET at the end (each command a
-- script runs is a cost of its own in Redis: issue 32).
local set = {}
local function put(field, value)
  set[#set + 1] = field
  set[#set + 1] = value
end
-- The domain's address group as release.lua saw it (nil: none, unresolved or exempt).
local group_ip = f[8]
if group_ip == '?' or f[11] == '1' then group_ip = nil end
local slow, iv = tonumber(f[1]) or 1, tonumber(f[3]) or 0
local tat = tonumber(f[2]) or now
-- A Crawl-delay learnt from robots.txt after the release applies at once.
local delay = tonumber(f[5]) or 0
local longer = f[4] ~= '1' and delay * slow > iv
if longer then iv = delay * slow end

local function wake()
  if redis.call('LLEN', KEYS[4]) > 0 then
    -- LT: wakes a domain that waited for this lease; never postpones one.
    redis.call('ZADD', KEYS[1], 'LT', now, ARGV[2])
  end
end

-- The address lease of this URL back (its waiting domains woken), and the address's bucket
-- paced from ``from`` + its interval (nil: not charged; refund: its token given back).
local aprefix, aiv = ARGV[15] or '', tonumber(ARGV[16]) or 0
local function address_end(from, refund)
  local a = group_ip
  if not a or aprefix == '' then return end
  if redis.call('ZREM', aprefix .. 'l:' .. a, ARGV[1]) == 1 then
    local waiting = aprefix .. 'w:' .. a
    for _, d in ipairs(redis.call('SMEMBERS', waiting)) do
      redis.call('ZADD', KEYS[1], 'XX', 'LT', now, d)
    end
    redis.call('DEL', waiting)
  end
  if aiv <= 0 or (from == nil and not refund) then return end
  local key = aprefix .. ':' .. a
  local gtat = tonumber(redis.call('HGET', key, 'tat')) or now
  if refund then gtat = gtat - aiv else gtat = math.max(gtat, from + aiv) end
  redis.call('HSET', key, 'tat', string.format('%.6f', gtat))
  -- The address's send gate follows the real send too (as the host's, below).
  local asg = tonumber(redis.call('HGET', key, 'sg')) or 0
  if not refund and from + aiv > asg then
    redis.call('HSET', key, 'sg', string.format('%.6f', from + aiv))
  end
end

if event == 'refund' then
  tat = tat - (tonumber(f[3]) or 0)
  redis.call('HSET', KEYS[3], 'tat', string.format('%.6f', tat))
  if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
    address_end(nil, true)
    wake()
  end
  return tostring(slow)
end
if event == 'extra' then
  tat = math.max(tat, now + iv) + iv
  redis.call('HSET', KEYS[3], 'tat', string.format('%.6f', tat))
  -- The address's bucket pays for it the same way (it reached the same server).
  if group_ip and aprefix ~= '' and aiv > 0 then
    local key = aprefix .. ':' .. group_ip
    local gtat = tonumber(redis.call('HGET', key, 'tat')) or now
    redis.call('HSET', key, 'tat', string.format('%.6f', math.max(gtat, now + aiv) + aiv))
  end
  return tostring(slow)
end

-- The lease is gone when the request was refunded (or its lease expired): nothing to charge.
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  local sent = tonumber(ARGV[7]) or -1
  local from = now
  if longer or event ~= 'ok' or sent < 0 then
    tat = math.max(tat, now + iv)
    address_end(now, false)
  else
    from = now - sent
    tat = math.max(tat, from + iv)
    address_end(from, false)
  end
  -- The send gate (gate_lib.lua) follows the real send as well: a request that left late
  -- (its thread starved past its slot) pushes the host's next slot back, so the next send,
  -- on time, does not come closer to it than the interval.
  if from + iv > (tonumber(f[12]) or 0) then put('sg', string.format('%.6f', from + iv)) end
end
if (ARGV[8] or '') ~= '' then
  put('ip', ARGV[8])
  put('ipx', ARGV[9])
  put('ip_until', string.format('%.6f', now + (tonumber(ARGV[14]) or 300)))
end
local latency, target = tonumber(ARGV[10]) or -1, tonumber(ARGV[12]) or 0
if target > 0 and latency >= 0 then
  local low = tonumber(f[10]) or 0
  local old = tonumber(f[9]) or low
  local new = math.max(low, math.min(tonumber(ARGV[13]) or 60, (old + latency / target) / 2))
  if ARGV[11] == '1' or new > old then
    put('at', string.format('%.6f', new))
  end
  put('lat', string.format('%.6f', latency))
end
local cap = tonumber(ARGV[5])
if event == 'ok' then
  slow = math.max(1, slow * 0.8)
elseif event == 'throttle' then
  slow = math.min(cap, slow * 2)
elseif event ~= 'down' then  -- error: a timeout or 5xx; "down" is the circuit's (below)
  slow = math.min(cap, slow * 1.5)
end
if slow < 1.01 then slow = 1 end
put('slow', tostring(slow))
put('tat', string.format('%.6f', tat))
local down_for, dead = -1, 0
if event == 'down' then
  local fails = (tonumber(f[6]) or 0) + 1
  local since = tonumber(f[7]) or now
  put('fails', fails)
  put('down_since', string.format('%.6f', since))
  if fails >= 3 then
    down_for = now - since
    if down_for >= (tonumber(ARGV[6]) or 120) then
      if redis.call('HSETNX', KEYS[3], 'dead', '1') == 1 then dead = 1 end
    else
      -- Probes 10 s apart at most: the cost of seeing a host that is back (issue: a 60 s
      -- cap found it 43 s late) against one connection attempt per 10 s while it is down.
      seconds = math.max(seconds, math.min(5 * 2 ^ (fails - 3), 10))
    end
  end
elseif event == 'ok' and f[6] then
  redis.call('HDEL', KEYS[3], 'fails', 'down_since', 'dead')
end
if seconds > 0 then put('not_before', string.format('%.6f', now + seconds)) end
redis.call('HSET', KEYS[3], unpack(set))
wake()
return tostring(slow) .. '|' .. string.format('%.3f', down_for) .. '|' .. dead
