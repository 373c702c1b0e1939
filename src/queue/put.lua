-- put.lua: add or replace a retry-queue item.
-- KEYS[1]  <prefix>{q<shard>}:due    sorted set: item id -> due (or lease end), ms
-- KEYS[2]  <prefix>{q<shard>}:items  hash: item id -> sealed item
-- ARGV     1 id  2 sealed item  3 due_ms
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
