-- Admit a batch of candidate URLs into one partition of a crawl, atomically (bloom_lib.lua and
-- tails_lib.lua are prepended): Bloom check-and-set  +  push onto the per-domain frontier (its
-- head, or its spill buffer beyond the head: tails_lib.lua)  +  completion count.
-- Doing all three in one script is what makes the crawl exact: a URL whose Bloom bits are
-- set is always also queued and counted, even if the calling worker dies right after. Every
-- URL of the batch belongs to this partition (its domain's), whose Bloom filter holds only
-- the partition's URLs, so all the keys are in one hash slot.
--
-- KEYS[1] partition flow hash ("in": URLs admitted)   KEYS[2] stats hash   KEYS[3] ready zset
-- KEYS[4] flush zset (domains with a non-empty spill buffer, scored by when a dispatcher is
--         to write it out: 0 once it holds a chunk, else when it began to fill; state/tails.py)
-- KEYS[5..] the Bloom shard keys this batch touches (a shard in ARGV[8] indexes them)
-- ARGV (built by calls.AdmitCall):
-- ARGV[1] max_pages of a crawl with one partition (checked against its "admitted"), -1 none
-- ARGV[2] k   ARGV[3] queue key prefix
-- ARGV[4] 1 = depth-first (LIFO), else breadth-first (FIFO)   ARGV[5] nshards (of KEYS[4..])
-- ARGV[6] 1 = force: skip the Bloom test (replaying failed URLs, which are already in it)
-- ARGV[7] bits per Bloom shard (m)
-- ARGV[8] every URL's (shard, h1 mod m, h2 mod m), packed uint32 triples (see bloom_lib.lua)
-- ARGV[9] URLs the caller already knew to be in the filter and left out (KnownURLs):
--          counted as discovered and as duplicates, nothing else
-- ARGV[10] most URLs this call may admit (-1 = no limit): the room reserve.lua granted
--          under max_pages when the crawl has several partitions
-- ARGV[11..17] the heads and tails (tails_lib.lua tails_args): head size (0: the rule), its
--          seconds of fetching, the crawl's interval, chunk size, buffer, index and domain
--          prefixes
-- then per URL: domain, entry ("depth|url", formats.entry). An empty domain marks a URL that
-- robots.txt disallows (the caller knew the origin's rules): its bits are set, so it counts
-- once, as robots_disallowed and skipped:robots_disallowed, and it is never queued, needs no
-- fetch task and takes no room under max_pages.
-- A URL given twice in one batch is admitted once (the second counts as a duplicate).
-- Queue keys are built from the domain here rather than passed in KEYS because the set of
-- domains is open-ended; they carry the partition's hash tag, so they share its slot.
-- Returns {admitted, duplicates, over_limit, disallowed}.

local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local max_pages, k = tonumber(ARGV[1]), tonumber(ARGV[2])
local qprefix, dfs, nshards = ARGV[3], ARGV[4] == '1', tonumber(ARGV[5])
local force = ARGV[6] == '1'
local m = tonumber(ARGV[7])
local known = tonumber(ARGV[9]) or 0
local cap = tonumber(ARGV[10])
local T = tails_args(11)
local FIRST = 18
local count = (#ARGV - FIRST + 1) / 2
local seen, reads = {}, nil
if force then
  for i = 1, count do seen[i] = false end
else
  local S, A, B = bloom_decode(ARGV[8], count)
  if max_pages < 0 and cap < 0 then
    -- No limit can leave a new URL out, so every new URL's bits get set: check-and-set in
    -- one pass (4 BITFIELD arguments a bit instead of 3 to read and 4 to write; the
    -- arguments are most of this script's time). A URL given twice reads as new twice, as
    -- with bloom_test; `picked` below counts the second as a duplicate.
    local fresh = bloom_add(5, nshards, k, m, S, A, B, count)
    for i = 1, count do seen[i] = not fresh[i] end
  else
    seen, reads = bloom_test(5, nshards, k, m, S, A, B, count)
  end
end

local before = 0
if max_pages >= 0 then before = tonumber(redis.call('HGET', KEYS[2], 'admitted') or '0') end
local admitted, dups, over, blocked = 0, known, 0, 0
local chosen, picked, by_domain, domains = {}, {}, {}, {}
for i = 1, count do
  local base = FIRST + (i - 1) * 2
  local entry = ARGV[base + 1]
  if seen[i] or picked[entry] then
    dups = dups + 1
  elseif ARGV[base] == '' then
    blocked = blocked + 1
    chosen[i], picked[entry] = true, true
  elseif not force and ((max_pages >= 0 and before + admitted >= max_pages)
                        or (cap >= 0 and admitted >= cap)) then
    -- Bits stay unset: a URL that was never admitted must not look seen.
    over = over + 1
  else
    admitted = admitted + 1
    chosen[i], picked[entry] = true, true
    local domain = ARGV[base]
    local list = by_domain[domain]
    if list == nil then
      list = {}
      by_domain[domain] = list
      domains[#domains + 1] = domain
    end
    list[#list + 1] = entry
  end
end
if reads and admitted + blocked > 0 then bloom_set(5, nshards, k, reads, chosen) end
-- A domain's new entries go to its head while there is room and nothing of it waits in a tail
-- (breadth-first: FIFO holds, the tail's entries are older); the rest to its spill buffer.
-- Depth-first pushes them all on the head's top, and the head's bottom, past its size, goes
-- to the top of the buffer. One push per domain and place, several values in order (LPUSH
-- a b c leaves c b a, as three LPUSHes).
local function push(cmd, key, list, lo, hi)
  for i = lo, hi, BLOOM_MAX_ARGS do
    redis.call(cmd, key, unpack(list, i, math.min(i + BLOOM_MAX_ARGS - 1, hi)))
  end
end
for _, domain in ipairs(domains) do
  local list = by_domain[domain]
  local q, sp = qprefix .. domain, T.sprefix .. domain
  local head = head_size(T, domain)
  if dfs then
    push('LPUSH', q, list, 1, #list)
    local over = redis.call('LLEN', q) - head
    if over > 0 then
      -- RPOP's first is the bottom of the head: the newest spilled, it goes on the buffer's top.
      local bottom = redis.call('RPOP', q, over)
      push('LPUSH', sp, bottom, 1, #bottom)
    end
  else
    local room = 0
    if redis.call('LLEN', sp) == 0 and redis.call('LLEN', T.iprefix .. domain) == 0 then
      room = math.max(0, math.min(#list, head - redis.call('LLEN', q)))
    end
    if room > 0 then push('RPUSH', q, list, 1, room) end
    if room < #list then push('RPUSH', sp, list, room + 1, #list) end
  end
  -- LT: a buffer keeps the time it began to fill (its oldest entry's wait), 0 once full.
  local buffered = redis.call('LLEN', sp)
  if buffered >= T.chunk then
    redis.call('ZADD', KEYS[4], 'LT', 0, domain)
  elseif buffered > 0 then
    redis.call('ZADD', KEYS[4], 'LT', now, domain)
  end
  -- NX: a domain already waiting for its next token (or for a lease) keeps its time. A domain
  -- whose entries all went to its buffer is in the ready zset too: release.lua tops its head up.
  redis.call('ZADD', KEYS[3], 'NX', now, domain)
end
if admitted > 0 then
  redis.call('HINCRBY', KEYS[1], 'in', admitted)
  redis.call('HINCRBY', KEYS[2], 'queued', admitted)
end
if force then
  -- Replayed URLs were admitted once already: count them apart so totals stay exact.
  redis.call('HINCRBY', KEYS[2], 'replayed', admitted)
  return {admitted, 0, 0, 0}
end
if admitted > 0 then redis.call('HINCRBY', KEYS[2], 'admitted', admitted) end
redis.call('HINCRBY', KEYS[2], 'discovered', count + known)
if dups > 0 then redis.call('HINCRBY', KEYS[2], 'deduplicated', dups) end
if over > 0 then redis.call('HINCRBY', KEYS[2], 'skipped:max_pages', over) end
if blocked > 0 then
  redis.call('HINCRBY', KEYS[2], 'robots_disallowed', blocked)
  redis.call('HINCRBY', KEYS[2], 'skipped:robots_disallowed', blocked)
end
return {admitted, dups, over, blocked}
