-- The Bloom check-and-set as it was before the packed-hash encoding (bloom_lib.lua + bloom_add.lua
-- of commit 2a579a9), kept only so that bench/bloom.py can measure before/after in one run.
-- ARGV[1] k  ARGV[2] nshards  then per URL: shard, k offsets (one argument each).
-- Known limit: fails with 'too many results to unpack' past ~200 URLs per shard per call.
-- Bloom filter helpers, prepended by seen.py to the scripts that need them (EVAL scripts
-- cannot call each other). Bit positions are computed by the client (mmh3 double hashing),
-- so the script only touches bits: one BITFIELD call per shard per batch, not k per URL.
--
-- items: array of {shard (0-based), offset_1, ..., offset_k}
-- Shard s lives in KEYS[first_key + s].

local function bloom_test(first_key, nshards, k, items)
  local gets, owners = {}, {}
  for s = 0, nshards - 1 do gets[s] = {}; owners[s] = {} end
  for i, item in ipairs(items) do
    local s = item[1]
    local g, o = gets[s], owners[s]
    for j = 2, k + 1 do
      g[#g + 1] = 'GET'; g[#g + 1] = 'u1'; g[#g + 1] = item[j]
      o[#o + 1] = i
    end
  end
  local seen = {}
  for i = 1, #items do seen[i] = true end
  for s = 0, nshards - 1 do
    if #gets[s] > 0 then
      local bits = redis.call('BITFIELD', KEYS[first_key + s], unpack(gets[s]))
      for j, bit in ipairs(bits) do
        if bit == 0 then seen[owners[s][j]] = false end
      end
    end
  end
  return seen
end

local function bloom_set(first_key, nshards, k, items, chosen)
  local sets = {}
  for s = 0, nshards - 1 do sets[s] = {} end
  for _, i in ipairs(chosen) do
    local item = items[i]
    local t = sets[item[1]]
    for j = 2, k + 1 do
      t[#t + 1] = 'SET'; t[#t + 1] = 'u1'; t[#t + 1] = item[j]; t[#t + 1] = 1
    end
  end
  for s = 0, nshards - 1 do
    if #sets[s] > 0 then redis.call('BITFIELD', KEYS[first_key + s], unpack(sets[s])) end
  end
end

-- Reads `count` items of `k + 1` numbers from ARGV starting at `start`, with `skip` other
-- arguments before each item (the caller reads those itself).
local function bloom_items(start, count, k, skip)
  local items = {}
  local stride = skip + k + 1
  for i = 0, count - 1 do
    local base = start + i * stride + skip
    local item = {tonumber(ARGV[base])}
    for j = 1, k do item[j + 1] = ARGV[base + j] end
    items[i + 1] = item
  end
  return items
end

-- Check-and-set a batch of URLs in the Bloom filter (bloom_lib.lua is prepended).
-- Atomic: two workers adding the same URL at once cannot both see it as new.
-- KEYS[1..nshards]  shard keys
-- ARGV[1] k   ARGV[2] nshards   then per URL: shard, k offsets
-- Returns one integer per URL: 1 = new (bits were set now), 0 = already present.
local k, nshards = tonumber(ARGV[1]), tonumber(ARGV[2])
local count = (#ARGV - 2) / (k + 1)
local items = bloom_items(3, count, k, 0)
local seen = bloom_test(1, nshards, k, items)
local chosen, out = {}, {}
for i = 1, count do
  if seen[i] then out[i] = 0 else out[i] = 1; chosen[#chosen + 1] = i end
end
bloom_set(1, nshards, k, items, chosen)
return out
