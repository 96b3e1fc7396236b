-- Every partition of the crawl is drained (ledger.drained: the URLs that reached a final state
-- equal the URLs admitted, read so that no URL can be in between): mark the crawl
-- 'finishing'. final_status says what it will be; the finisher (recorder.crawl_finished) sets
-- the status once summary.json and the rest are written, so a crawl never says finished with
-- a record or its summary missing. Called by whoever finds the crawl drained: the task that
-- finished its last URL, a redelivered one, or a dispatcher; only the first call marks it.
-- KEYS[1] crawl state hash
-- Returns 1 if the crawl is finishing (now or already), 0 if it is final already.
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'finishing' then return 1 end
if status == 'finished' or status == 'cancelled' or not status then return 0 end
local t = redis.call('TIME')
local final = 'finished'
if redis.call('HGET', KEYS[1], 'cancelled') == '1' then final = 'cancelled' end
redis.call('HSET', KEYS[1], 'status', 'finishing', 'final_status', final,
           'finished_at', t[1] .. '.' .. string.format('%06d', t[2]))
return 1
