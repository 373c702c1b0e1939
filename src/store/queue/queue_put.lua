-- queue_put.lua: add an item, or reschedule it as the current claimer.
-- KEYS[1]  <prefix>{q<shard>}:due     sorted set: item id -> due (or lease end), ms
-- KEYS[2]  <prefix>{q<shard>}:items   hash: item id -> sealed item
-- KEYS[3]  <prefix>{q<shard>}:lease   hash: item id -> fencing token of the current claim
-- KEYS[4]  <prefix>{q<shard>}:born    sorted set: item id -> acceptance, ms (queue age)
-- KEYS[5]  <prefix>{q<shard>}:aside   hash: item id -> sealed item that could not be opened
-- ARGV     1 id  2 sealed item  3 due_ms  4 fence (0: a new item)  5 accepted_ms
--          6 ttl_ms (the keys live at least this long)  7 cap (items per shard)
-- Returns  1 written, 0 stale claim (nothing written), -1 shard full (nothing written)
local id, fence = ARGV[1], ARGV[4]
local exists = redis.call('HEXISTS', KEYS[2], id) == 1
if fence ~= '0' then
  if not exists or redis.call('HGET', KEYS[3], id) ~= fence then return 0 end
elseif not exists and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[7]) then
  return -1
end
redis.call('HSET', KEYS[2], id, ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[3], id)
redis.call('ZADD', KEYS[4], ARGV[5], id)
redis.call('HDEL', KEYS[3], id)
-- Bounded even when no replica ever claims again: the shard lives until its newest item is
-- past its staleness window (plus a margin), then goes.
local ttl = tonumber(ARGV[6])
for i = 1, 4 do
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return 1
