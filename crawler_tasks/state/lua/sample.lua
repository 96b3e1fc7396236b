-- Append one sample of a crawl's counters to its time series and keep only the newest ones:
-- the series stays bounded (a list of at most ARGV[2] entries) however long the crawl runs.
-- The caller took the interval's lock (SET NX PX on the crawl's "sampled" key) first, so that
-- of all the dispatchers of a cluster only one samples each interval.
-- KEYS[1] crawl series list
-- ARGV[1] the sample (JSON)  ARGV[2] samples kept
-- Returns the series' length.
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
return redis.call('LLEN', KEYS[1])
