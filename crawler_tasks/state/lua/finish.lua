-- A URL reached its final state (fetched and parsed, failed for good, disallowed, cancelled).
-- Exactly once per admitted URL: the inflight entry is the token; a redelivered or duplicated
-- task finds it gone and changes nothing. The task that brings the counter to zero finishes
-- the crawl, so there is no idle timeout anywhere.
-- KEYS[1] inflight  KEYS[2] outstanding  KEYS[3] stats  KEYS[4] state  KEYS[5] per-second
-- KEYS[6] running crawls set  KEYS[7] attempts hash
-- ARGV[1] url  ARGV[2] crawl id  then pairs: stats field, increment
-- Returns URLs still outstanding (0 = this call finished the crawl), or -1 if already final.
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return -1 end
redis.call('HDEL', KEYS[7], ARGV[1])
local left = redis.call('DECR', KEYS[2])
for i = 3, #ARGV, 2 do redis.call('HINCRBY', KEYS[3], ARGV[i], ARGV[i + 1]) end
local t = redis.call('TIME')
redis.call('HINCRBY', KEYS[5], t[1], 1)
if left <= 0 then
  local status = 'finished'
  if redis.call('HGET', KEYS[4], 'cancelled') == '1' then status = 'cancelled' end
  redis.call('HSET', KEYS[4], 'status', status, 'finished_at', t[1] .. '.' .. string.format('%06d', t[2]))
  redis.call('SREM', KEYS[6], ARGV[2])
end
return left
