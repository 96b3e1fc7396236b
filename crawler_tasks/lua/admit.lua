-- Admit a batch of candidate URLs into one crawl, atomically (bloom_lib.lua is prepended):
--   Bloom check-and-set  +  push onto the per-domain frontier  +  completion counter.
-- Doing all three in one script is what makes the crawl exact: a URL whose Bloom bits are
-- set is always also queued and counted, even if the calling worker dies right after.
--
-- KEYS[1] outstanding counter   KEYS[2] stats hash   KEYS[3] ready zset
-- KEYS[4..] Bloom shard keys
-- ARGV[1] unused      ARGV[2] max_pages (0 = none)   ARGV[3] k   ARGV[4] queue key prefix
-- ARGV[5] 1 = depth-first (LIFO), else breadth-first (FIFO)   ARGV[6] nshards
-- ARGV[7] 1 = force: skip the Bloom test (replaying failed URLs, which are already in it)
-- then per URL: domain, entry ("depth|url"), shard, k offsets.
-- Queue keys are built from the domain here rather than passed in KEYS because the set of
-- domains is open-ended; this is fine on a single Redis.
-- Returns {admitted, duplicates, over_limit}.

local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local max_pages, k = tonumber(ARGV[2]), tonumber(ARGV[3])
local qprefix, dfs, nshards = ARGV[4], ARGV[5] == '1', tonumber(ARGV[6])
local force = ARGV[7] == '1'
local count = (#ARGV - 7) / (k + 3)
local items = bloom_items(8, count, k, 2)
local seen = {}
if force then
  for i = 1, count do seen[i] = false end
else
  seen = bloom_test(4, nshards, k, items)
end

local before = tonumber(redis.call('HGET', KEYS[2], 'admitted') or '0')
local chosen, dups, over, touched = {}, 0, 0, {}
for i = 1, count do
  local base = 8 + (i - 1) * (k + 3)
  if seen[i] then
    dups = dups + 1
  elseif not force and max_pages > 0 and before + #chosen >= max_pages then
    -- Bits stay unset: a URL that was never admitted must not look seen.
    over = over + 1
  else
    chosen[#chosen + 1] = i
    local domain = ARGV[base]
    if dfs then
      redis.call('LPUSH', qprefix .. domain, ARGV[base + 1])
    else
      redis.call('RPUSH', qprefix .. domain, ARGV[base + 1])
    end
    touched[domain] = true
  end
end
if not force then bloom_set(4, nshards, k, items, chosen) end
for domain, _ in pairs(touched) do
  -- NX: a domain already waiting for its next token (or for a lease) keeps its time.
  redis.call('ZADD', KEYS[3], 'NX', now, domain)
end
local admitted = #chosen
if admitted > 0 then
  redis.call('INCRBY', KEYS[1], admitted)
  redis.call('HINCRBY', KEYS[2], 'queued', admitted)
end
if force then
  -- Replayed URLs were admitted once already: count them apart so totals stay exact.
  redis.call('HINCRBY', KEYS[2], 'replayed', admitted)
  return {admitted, 0, 0}
end
if admitted > 0 then redis.call('HINCRBY', KEYS[2], 'admitted', admitted) end
redis.call('HINCRBY', KEYS[2], 'discovered', count)
if dups > 0 then redis.call('HINCRBY', KEYS[2], 'deduplicated', dups) end
if over > 0 then redis.call('HINCRBY', KEYS[2], 'skipped:max_pages', over) end
return {admitted, dups, over}
