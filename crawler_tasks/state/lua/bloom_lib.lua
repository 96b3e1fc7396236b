-- Bloom filter helpers, prepended by scripts.py to the scripts that need them (EVAL scripts
-- cannot call each other). The client hashes each URL once (128-bit murmur3, see seen.py) and
-- sends three numbers per URL, packed as little-endian uint32 into ONE string argument:
--     shard (0-based),  a = h1 mod m,  b = h2 mod m          (m = bits per shard)
-- The k offsets a, a+b, a+2b, ... (mod m) are BloomShape.positions() exactly: they are
-- computed here with additions only (every value < 2^33, exact in Lua's doubles). One string
-- instead of k + 1 arguments per URL saves most of the argument handling on both sides.
--
-- Bits are read and written with BITFIELD, many ops per call, but at most BLOOM_MAX_ARGS
-- arguments per call: Lua's unpack() cannot return more than ~8000 values ("too many results
-- to unpack"), so one call per shard fails for batches of more than ~200 URLs.
-- Shard s lives in KEYS[first_key + s]: the caller names only the shards its URLs touch
-- (bloom.py), so a huge filter costs what is stored. URL indexes are 1-based, in order sent.
-- Constant arguments are strings: redis.call() turns each Lua number into text with
-- sprintf("%.17g"), which was ~20 % of the script's time for the value 1 of every SET.

local BLOOM_MAX_ARGS = 7000

-- Decodes `count` packed (shard, a, b) triples into three arrays S, A, B.
local function bloom_decode(blob, count)
  local S, A, B = {}, {}, {}
  local i, pos = 0, 1
  while i < count do
    local n = math.min(600, count - i)
    local v = {struct.unpack('<' .. string.rep('I4', 3 * n), blob, pos)}
    for j = 0, n - 1 do
      local t = 3 * j
      S[i + j + 1], A[i + j + 1], B[i + j + 1] = v[t + 1], v[t + 2], v[t + 3]
    end
    pos = v[3 * n + 1]
    i = i + n
  end
  return S, A, B
end

-- URL indexes grouped by shard: by[s] = {i, ...} in order.
local function bloom_bucket(S, count, nshards)
  local by = {}
  for s = 0, nshards - 1 do by[s] = {} end
  for i = 1, count do
    local t = by[S[i]]
    t[#t + 1] = i
  end
  return by
end

-- Read the k bits of every URL. Returns seen (seen[i] = all bits of URL i are set) and the
-- reads made, per shard {URL indexes, positions, bits}, for bloom_set.
local function bloom_test(first_key, nshards, k, m, S, A, B, count)
  local seen, reads = {}, {}
  local per_url = math.floor(BLOOM_MAX_ARGS / (3 * k))
  local by = bloom_bucket(S, count, nshards)
  for s = 0, nshards - 1 do
    local items, P, R = by[s], {}, {}
    local key, n, np = KEYS[first_key + s], #by[s], 0
    local args = {}
    for lo = 1, n, per_url do
      local hi = math.min(lo + per_url - 1, n)
      local c, first = 0, np
      for x = lo, hi do
        local i = items[x]
        local pos, b = A[i], B[i]
        for _ = 1, k do
          np = np + 1
          P[np] = pos
          args[c + 1] = 'GET'; args[c + 2] = 'u1'; args[c + 3] = pos
          c = c + 3
          pos = pos + b
          if pos >= m then pos = pos - m end
        end
      end
      local bits = redis.call('BITFIELD', key, unpack(args, 1, c))
      local j = 0
      for x = lo, hi do
        local all = true
        for q = j + 1, j + k do
          local bit = bits[q]
          R[first + q] = bit
          if bit == 0 then all = false end
        end
        j = j + k
        seen[items[x]] = all
      end
    end
    reads[s] = {items, P, R}
  end
  return seen, reads
end

-- After bloom_test: set the bits of the URLs in `chosen` (chosen[i] = true). Only bits that
-- read 0 are written; the others are 1 already.
local function bloom_set(first_key, nshards, k, reads, chosen)
  local per_call = math.floor(BLOOM_MAX_ARGS / 4)
  for s = 0, nshards - 1 do
    local items, P, R = reads[s][1], reads[s][2], reads[s][3]
    local key, args, c, w = KEYS[first_key + s], {}, 0, 0
    for x = 1, #items do
      if chosen[items[x]] then
        for j = (x - 1) * k + 1, x * k do
          if R[j] == 0 then
            args[c + 1] = 'SET'; args[c + 2] = 'u1'; args[c + 3] = P[j]; args[c + 4] = '1'
            c, w = c + 4, w + 1
            if w == per_call then
              redis.call('BITFIELD', key, unpack(args, 1, c))
              c, w = 0, 0
            end
          end
        end
      end
    end
    if c > 0 then redis.call('BITFIELD', key, unpack(args, 1, c)) end
  end
end

-- Check-and-set in one pass (BITFIELD SET returns the old bit): 4 arguments per bit instead of
-- 3 to read plus 4 to write, the fastest form when most URLs are new. Returns fresh[i] = true
-- when URL i was not in the filter before this call, as bloom_test would say: some bit of it
-- was 0 when its own SET ran, or was flipped earlier in this batch by another URL (rare: a
-- URL given twice, or an in-batch collision; checked only then).
local function bloom_add(first_key, nshards, k, m, S, A, B, count)
  local fresh = {}
  local per_url = math.floor(BLOOM_MAX_ARGS / (4 * k))
  local by = bloom_bucket(S, count, nshards)
  for s = 0, nshards - 1 do
    local items = by[s]
    local key, n = KEYS[first_key + s], #by[s]
    local args, zeros, nz, flipped, hashed = {}, {}, 0, {}, 0
    for lo = 1, n, per_url do
      local hi = math.min(lo + per_url - 1, n)
      local c = 0
      for x = lo, hi do
        local i = items[x]
        local pos, b = A[i], B[i]
        for _ = 1, k do
          args[c + 1] = 'SET'; args[c + 2] = 'u1'; args[c + 3] = pos; args[c + 4] = '1'
          c = c + 4
          pos = pos + b
          if pos >= m then pos = pos - m end
        end
      end
      local old = redis.call('BITFIELD', key, unpack(args, 1, c))
      local j = 0
      for x = lo, hi do
        local i = items[x]
        local new = false
        for q = j + 1, j + k do
          if old[q] == 0 then
            new = true
            nz = nz + 1
            zeros[nz] = args[4 * q - 1]
          end
        end
        j = j + k
        if new then
          fresh[i] = true
        elseif nz > 0 then
          for z = hashed + 1, nz do flipped[zeros[z]] = true end
          hashed = nz
          local pos, b = A[i], B[i]
          for _ = 1, k do
            if flipped[pos] then
              fresh[i] = true
              break
            end
            pos = pos + b
            if pos >= m then pos = pos - m end
          end
        end
      end
    end
  end
  return fresh
end
