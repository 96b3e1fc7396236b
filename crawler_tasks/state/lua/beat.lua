-- A worker process's heartbeat (workers.Heartbeat), stamped with Redis's clock, not the
-- worker's: every process judges "dead after N seconds" on the clock that wrote the beat, so
-- two hosts whose clocks differ by seconds cannot take each other for dead.
-- KEYS[1] the workers hash  ARGV[1] the worker process id
-- Returns the time written (seconds).
local t = redis.call('TIME')
local now = t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
redis.call('HSET', KEYS[1], ARGV[1], now)
return now
