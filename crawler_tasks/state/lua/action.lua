-- An operator's action on a crawl (a dashboard control: pause, resume, cancel, retry failed,
-- set a host's rate): kept in the crawl's bounded action log, so that the crawl page shows it
-- to whoever opens it later, and published on the crawl's event channel for live listeners
-- (Crawl.events()). Both or neither: one script.
-- KEYS[1] crawl actions list
-- ARGV[1] the event (JSON)  ARGV[2] actions kept  ARGV[3] the crawl's event channel
-- Returns the number of listeners the event reached.
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
return redis.call('PUBLISH', ARGV[3], ARGV[1])
