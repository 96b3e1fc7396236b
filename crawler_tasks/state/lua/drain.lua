-- Take every pending entry of one domain out of the frontier at once, as in flight, so the
-- caller records each with a final state without a request: the host was declared dead
-- (done.lua) and probing it once per URL would take hours on a big site.
-- KEYS[1] inflight  KEYS[2] ready  KEYS[3] stats
-- ARGV[1] the domain's queue key  ARGV[2] domain  ARGV[3] its spill buffer key (state/tails.py;
-- its chunks are in the store: the caller moves each into the head, Tails.drain,
-- and calls this again)
-- Returns the entries ("depth|url", formats.entry).
local entries = redis.call('LRANGE', ARGV[1], 0, -1)
for _, e in ipairs(redis.call('LRANGE', ARGV[3], 0, -1)) do entries[#entries + 1] = e end
redis.call('DEL', ARGV[1], ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[2])
for _, e in ipairs(entries) do
  local bar = string.find(e, '|', 1, true)
  redis.call('HSET', KEYS[1], string.sub(e, bar + 1), ARGV[2] .. '|0|' .. string.sub(e, 1, bar - 1))
end
if #entries > 0 then redis.call('HINCRBY', KEYS[3], 'queued', -#entries) end
return entries
