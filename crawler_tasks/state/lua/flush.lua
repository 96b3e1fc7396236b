-- Swap the first chunk of a domain's spill buffer for the id of the chunk a dispatcher has just
-- written to the chunk store (state/tails.py), if the buffer still begins with those entries.
-- Breadth-first the chunk is the buffer's oldest entries (its left) and goes last in the
-- index; depth-first it is the buffer's bottom (its right: the entries spilled first) and
-- goes first in the index, before the older chunks (tails_lib.lua).
-- KEYS[1] the domain's spill buffer  KEYS[2] its chunk index  KEYS[3] spilled hash
-- KEYS[4] flush zset (admit.lua)  KEYS[5] stats hash ('chunks_written')
-- ARGV[1] domain  ARGV[2] chunk id ("" when there was nothing to write: only rescored)
-- ARGV[3] entries in the chunk (fewer than a chunk: an idle buffer written out whole)
-- ARGV[4] sha1 of the entries joined by newlines
-- ARGV[5] 1 = depth-first  ARGV[6] chunk size
-- Afterwards the domain's score says what is left: none (empty), 0 (a chunk or more: due
-- now), else now (less than a chunk: due again after frontier_flush_seconds).
-- Returns 1 indexed; 2 not the buffer's any more but the id is indexed (another flush of the
-- same entries was first: the file is that one's); 0 neither (the caller deletes the file).
local n, dfs, id = tonumber(ARGV[3]), ARGV[5] == '1', ARGV[2]
local result = 0
if n > 0 then
  local entries
  if dfs then
    entries = redis.call('LRANGE', KEYS[1], -n, -1)
  else
    entries = redis.call('LRANGE', KEYS[1], 0, n - 1)
  end
  if #entries == n and redis.sha1hex(table.concat(entries, '\n')) == ARGV[4] then
    if dfs then
      redis.call('LTRIM', KEYS[1], 0, -n - 1)
      redis.call('LPUSH', KEYS[2], id)
    else
      redis.call('LTRIM', KEYS[1], n, -1)
      redis.call('RPUSH', KEYS[2], id)
    end
    redis.call('HINCRBY', KEYS[3], ARGV[1], n)
    redis.call('HINCRBY', KEYS[5], 'chunks_written', 1)
    result = 1
  elseif redis.call('LPOS', KEYS[2], id) then
    result = 2
  end
end
local left = redis.call('LLEN', KEYS[1])
if left == 0 then
  redis.call('ZREM', KEYS[4], ARGV[1])
elseif left >= tonumber(ARGV[6]) then
  redis.call('ZADD', KEYS[4], 0, ARGV[1])
else
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[4], tonumber(t[1]) + tonumber(t[2]) / 1e6, ARGV[1])
end
return result
