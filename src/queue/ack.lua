-- ack.lua: remove a retry-queue item (delivered, given up, or expired).
-- KEYS[1]  <prefix>{q<shard>}:due    (layout in put.lua)
-- KEYS[2]  <prefix>{q<shard>}:items
-- ARGV     1 id
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
