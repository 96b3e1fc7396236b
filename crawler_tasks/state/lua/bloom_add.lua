-- Check-and-set a batch of URLs in the Bloom filter (bloom_lib.lua is prepended).
-- Atomic: two workers adding the same URL at once cannot both see it as new.
-- KEYS[1..nshards]  the shard keys these URLs touch (a packed shard indexes them)
-- ARGV[1] k   ARGV[2] nshards   ARGV[3] bits per shard (m)
-- ARGV[4] the URLs' (shard, h1 mod m, h2 mod m) as packed little-endian uint32 triples
-- ARGV[5] '1' = test only: report without setting any bit (read-only)
-- Returns one character per URL: '1' = new (was not in the filter before this call; its bits
-- are set now), '0' = already present. A string, not an array: ~1 us less per URL to parse.
local k, nshards, m = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local count = #ARGV[4] / 12
local S, A, B = bloom_decode(ARGV[4], count)
local out = {}
if ARGV[5] == '1' then
  local seen = bloom_test(1, nshards, k, m, S, A, B, count)
  for i = 1, count do out[i] = seen[i] and '0' or '1' end
else
  local fresh = bloom_add(1, nshards, k, m, S, A, B, count)
  for i = 1, count do out[i] = fresh[i] and '1' or '0' end
end
return table.concat(out)
