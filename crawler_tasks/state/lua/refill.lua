-- Move a domain's next chunk, read from the chunk store by a dispatcher (state/tails.py), into
-- its head, if it is still the next one: a chunk moved already (by another dispatcher, or by
-- one killed before it deleted the file) is not moved twice. The head's entries come first,
-- then the chunk's, in their order (both orders: tails_lib.lua); its domain is ready again.
-- Depth-first a non-empty buffer comes before any chunk: nothing is moved (release.lua tops
-- the head up from the buffer).
-- KEYS[1] the domain's head  KEYS[2] its chunk index  KEYS[3] spilled hash  KEYS[4] low set
-- KEYS[5] ready zset  KEYS[6] its spill buffer  KEYS[7] stats hash ('chunks_refilled')
-- ARGV[1] domain  ARGV[2] chunk id ("" when the index was empty: only unmarked)
-- ARGV[3] 1 = depth-first  ARGV[4..] the entries
-- Returns 1 moved, 0 not.
local d, id = ARGV[1], ARGV[2]
local FIRST = 4
redis.call('SREM', KEYS[4], d)
if id == '' or redis.call('LINDEX', KEYS[2], 0) ~= id then return 0 end
if ARGV[3] == '1' and redis.call('LLEN', KEYS[6]) > 0 then
  redis.call('ZADD', KEYS[5], 'NX', 0, d)
  return 0
end
redis.call('LPOP', KEYS[2])
local n = #ARGV - FIRST + 1
for lo = FIRST, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, lo, math.min(lo + 999, #ARGV)))
end
if redis.call('HINCRBY', KEYS[3], d, -n) <= 0 then redis.call('HDEL', KEYS[3], d) end
redis.call('HINCRBY', KEYS[7], 'chunks_refilled', 1)
-- NX: a domain still in the ready zset keeps its time (its next token or lease).
redis.call('ZADD', KEYS[5], 'NX', 0, d)
return 1
