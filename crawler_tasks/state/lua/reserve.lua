-- Reserve room under a crawl's max_pages before admitting URLs into one of its partitions
-- (admit.lua, when the crawl has several): the count of admitted URLs is crawl-wide, the
-- partitions are not in its hash slot. The caller gives back what turned out to be
-- duplicates once admit.lua has run, so the total never passes max_pages; while a batch holds
-- room it does not use, a racing batch may be turned away short of it.
-- KEYS[1] crawl state hash ("reserved")
-- ARGV[1] max_pages  ARGV[2] URLs wanting room
-- Returns how many may be admitted.
local used = tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0')
local grant = math.min(tonumber(ARGV[2]), math.max(0, tonumber(ARGV[1]) - used))
if grant > 0 then redis.call('HINCRBY', KEYS[1], 'reserved', grant) end
return grant
