-- Take a URL back from a worker that stopped beating (dispatcher.reclaim), if nothing else
-- touched it since it was read: the value must still be the one the dead worker left.
--   fetch: back to the frontier at once (the retry zset, due now), like a retry;
--   parse: its body is still waiting: the value loses its stage, and the caller publishes a
--          new parse task (a duplicate of a task that is still queued somewhere is harmless).
-- KEYS[1] inflight  KEYS[2] retry zset
-- ARGV[1] url  ARGV[2] the value read  ARGV[3] 'fetch' or 'parse'
-- ARGV[4] retry member (formats.retry_member) or the value without its stage
-- Returns 1 if taken back, 0 if the URL moved on meanwhile.
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
if ARGV[3] == 'fetch' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[2], tonumber(t[1]) + tonumber(t[2]) / 1e6, ARGV[4])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
end
return 1
