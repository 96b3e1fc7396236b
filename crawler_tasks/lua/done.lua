-- A fetch of domain d has ended: return its lease and adapt the domain's pace.
-- ok: recover 20 % of the slow-down; throttle (429/503): halve the rate and honour
-- Retry-After; error (timeout, 5xx): slow down by half again. The factor is capped.
-- KEYS[1] ready  KEYS[2] lease zset of d  KEYS[3] domain state hash  KEYS[4] queue of d
-- ARGV[1] url  ARGV[2] domain  ARGV[3] ok|throttle|error  ARGV[4] Retry-After seconds (0 none)
-- ARGV[5] maximum slow-down factor
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
redis.call('ZREM', KEYS[2], ARGV[1])
local slow = tonumber(redis.call('HGET', KEYS[3], 'slow') or '1')
local outcome, cap = ARGV[3], tonumber(ARGV[5])
if outcome == 'ok' then
  slow = math.max(1, slow * 0.8)
elseif outcome == 'throttle' then
  slow = math.min(cap, slow * 2)
else
  slow = math.min(cap, slow * 1.5)
end
if slow < 1.01 then slow = 1 end
redis.call('HSET', KEYS[3], 'slow', tostring(slow))
local retry_after = tonumber(ARGV[4])
if retry_after > 0 then
  redis.call('HSET', KEYS[3], 'not_before', tostring(now + retry_after))
end
if redis.call('LLEN', KEYS[4]) > 0 then
  -- LT: wakes a domain that waited for this lease; never postpones one.
  redis.call('ZADD', KEYS[1], 'LT', now, ARGV[2])
end
return tostring(slow)
