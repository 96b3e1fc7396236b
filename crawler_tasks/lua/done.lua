-- What happens to one request of domain d, on Redis's clock; release.lua charged the domain's
-- token bucket when it released the URL, these events correct the charge and end the lease.
--
-- A request is about to be sent (release.lua stored the interval "iv" it used, and "own" = 1
-- when the crawl's owner set the rate, which overrides Crawl-delay):
--   start   the released request goes out now. tat >= now + interval: the next request is
--           paced from when this one really started, not from its release (queueing delays
--           between release and fetch vary, and would otherwise bunch requests up).
--           ARGV[4]: the robots.txt Crawl-delay (capped; 0 none), stored and applied at once.
--   extra   a request release.lua did not pay for goes out now (robots.txt): as start, then
--           one more interval is charged.
--   refund  the released request will not be sent (robots.txt disallows it): one interval
--           is given back (never more than the release took).
-- A request has ended: return its lease and adapt the pace.
--   ok        recover 20 % of the slow-down;
--   throttle  (429/503) halve the rate;
--   error     (timeout, 5xx) slow down by half again. The factor is capped at ARGV[5].
--   ARGV[4]: Retry-After seconds (0 none): nothing is released before now + that.
-- KEYS[1] ready  KEYS[2] lease zset of d  KEYS[3] domain state hash  KEYS[4] queue of d
-- ARGV[1] url  ARGV[2] domain  ARGV[3] event  ARGV[4] seconds (see above)  ARGV[5] max slow-down
-- Returns the slow-down factor.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local event, seconds = ARGV[3], tonumber(ARGV[4]) or 0
local f = redis.call('HMGET', KEYS[3], 'slow', 'tat', 'iv', 'own', 'delay')
local slow = tonumber(f[1]) or 1

if event == 'start' or event == 'extra' or event == 'refund' then
  local iv, own = tonumber(f[3]) or 0, f[4] == '1'
  local delay = tonumber(f[5]) or 0
  if event == 'start' and seconds > 0 then
    delay = seconds
    redis.call('HSET', KEYS[3], 'delay', tostring(delay))
  end
  local tat = tonumber(f[2]) or now
  if event == 'refund' then
    tat = tat - iv
  else
    if not own and delay * slow > iv then iv = delay * slow end
    tat = math.max(tat, now + iv)
    if event == 'extra' then tat = tat + iv end
  end
  redis.call('HSET', KEYS[3], 'tat', string.format('%.6f', tat), 'iv', string.format('%.6f', iv))
  return tostring(slow)
end

redis.call('ZREM', KEYS[2], ARGV[1])
local cap = tonumber(ARGV[5])
if event == 'ok' then
  slow = math.max(1, slow * 0.8)
elseif event == 'throttle' then
  slow = math.min(cap, slow * 2)
else
  slow = math.min(cap, slow * 1.5)
end
if slow < 1.01 then slow = 1 end
redis.call('HSET', KEYS[3], 'slow', tostring(slow))
if seconds > 0 then
  redis.call('HSET', KEYS[3], 'not_before', string.format('%.6f', now + seconds))
end
if redis.call('LLEN', KEYS[4]) > 0 then
  -- LT: wakes a domain that waited for this lease; never postpones one.
  redis.call('ZADD', KEYS[1], 'LT', now, ARGV[2])
end
return tostring(slow)
