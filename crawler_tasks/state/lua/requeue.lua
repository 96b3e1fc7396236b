-- Put an in-flight URL back into the frontier to be retried after `delay` seconds.
-- It stays counted as outstanding (it has not reached a final state); only its inflight
-- entry moves to the retry zset, so a duplicate delivery of the failed task does nothing.
-- KEYS[1] inflight  KEYS[2] retry zset
-- ARGV[1] url  ARGV[2] retry member ("domain<TAB>depth|url", formats.retry_member)
-- ARGV[3] delay (s)
-- Returns 1 if requeued, 0 if the URL was not in flight.
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
local t = redis.call('TIME')
local due = tonumber(t[1]) + tonumber(t[2]) / 1e6 + tonumber(ARGV[3])
redis.call('ZADD', KEYS[2], due, ARGV[2])
return 1
