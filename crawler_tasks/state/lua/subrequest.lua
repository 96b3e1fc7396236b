-- A browser subrequest of a rendered page (worker/visit/render_guard.py: a script, an XHR, a
-- stylesheet) asks for a token of its host's bucket, the same GCRA bucket release.lua charges
-- for the crawl's own fetches ("tat" in the domain's state hash), so that a host never gets
-- more than its rate (+ burst) in any window, whether the requests are pages or what pages
-- pull in, from any worker. Third-party hosts a page pulls in get buckets of their own here.
-- No lease: a subrequest is one short request inside a render that holds no host slot; the
-- render task waits (bounded by its render deadline) and asks again.
-- The pace is release.lua's pace(): Crawl-delay (no burst) unless the crawl's owner set the
-- host's rate, the adaptive slow-down, Retry-After (not_before).
-- KEYS[1] the domain's state hash (release.lua's dom)
-- ARGV[1] seconds between two requests at the host's rate (0: unlimited), before slow-down
-- ARGV[2] burst  ARGV[3] 1 if the crawl's owner set the host's rate, else 0
-- ARGV[4] the partition's address key prefix, when the crawl groups hosts by address
-- (ip_rate), else "": the request waits for its address's send gate too (gate_lib.lua's
-- address_gate, prepended)
-- Returns "0" when the token is taken (send now), else the seconds to wait before asking again.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local f = redis.call('HMGET', KEYS[1], 'delay', 'slow', 'not_before', 'tat', 'ip', 'ipx')
local slow, base, burst = tonumber(f[2]) or 1, tonumber(ARGV[1]), tonumber(ARGV[2])
local delay = tonumber(f[1]) or 0
local iv, slack
if ARGV[3] ~= '1' and delay > 0 and delay >= base then
  iv, slack = delay * slow, 0
else
  iv = base * slow
  slack = burst * iv
end
local nb, tat = tonumber(f[3]) or 0, tonumber(f[4]) or now
if nb > 0 then tat = math.max(tat, nb + slack) end
if now < nb then return string.format('%.6f', nb - now) end
if now < tat - slack then return string.format('%.6f', tat - slack - now) end
-- A subrequest is a send too: it waits for the host's send gate like a page (gate_lib.lua).
local sg = tonumber(redis.call('HGET', KEYS[1], 'sg')) or now
if now < sg - slack then return string.format('%.6f', sg - slack - now) end
-- And its server address's gate, with no burst (the host's address as its last fetch or the
-- dispatcher resolved it; none yet: a host only rendered pages pull in is not grouped).
local akey, asg, aiv = address_gate(ARGV[4], f[5], f[6], now)
if akey and now < asg then return string.format('%.6f', asg - now) end
redis.call('HSET', KEYS[1], 'tat', string.format('%.6f', math.max(tat, now) + iv),
           'sg', string.format('%.6f', math.max(sg, now) + iv))
if akey then redis.call('HSET', akey, 'sg', string.format('%.6f', now + aiv)) end
return '0'
