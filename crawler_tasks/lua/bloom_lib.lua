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
