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
