-- The server address of domain d, resolved by the dispatcher before its first release
-- (worker/runtime/addresses.py, when the crawl groups hosts by address: state/pacing.py): stored in
-- the domain's hash with an expiry on Redis's clock, and the domain woken, in one step, so
-- that release.lua, which asked for it, releases it at once under its address's limits.
-- KEYS[1] ready  KEYS[2] domain state hash
-- ARGV[1] domain  ARGV[2] address ("?": it could not be resolved; not grouped meanwhile)
-- ARGV[3] 1 if the address or name is exempt (ip_exempt)  ARGV[4] seconds it is trusted
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
redis.call('HSET', KEYS[2], 'ip', ARGV[2], 'ipx', ARGV[3],
           'ip_until', string.format('%.6f', now + tonumber(ARGV[4])))
-- XX: only a domain that still has work; LT: never postpones it.
redis.call('ZADD', KEYS[1], 'XX', 'LT', now, ARGV[1])
return 1
