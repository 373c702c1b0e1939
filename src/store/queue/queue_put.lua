-- queue_put.lua: add an item, or reschedule it as the current claimer.
-- KEYS[1]  <prefix>{q<shard>}:due     sorted set: item id -> due (or lease end), ms
-- KEYS[2]  <prefix>{q<shard>}:items   hash: item id -> sealed item
-- KEYS[3]  <prefix>{q<shard>}:lease   hash: item id -> fencing token of the current claim
-- KEYS[4]  <prefix>{q<shard>}:born    sorted set: item id -> acceptance, ms (queue age)
-- KEYS[5]  <prefix>{q<shard>}:aside   hash: item id -> sealed item that could not be opened
-- KEYS[6]  <prefix>{q<shard>}:refs    hash: item id -> what the item settles, in the clear
--          (JSON [expires_ms, push id, target key]: no token, no ciphertext), so an item
--          that cannot be opened still settles its receipt target
-- ARGV     1 id  2 sealed item  3 due_ms  4 fence (0: a new item)  5 accepted_ms
--          6 ttl_ms (the keys live at least this long)  7 cap (items per shard)
--          8 the item's reference ('' for none)  9 '1': only if this shard neither holds
--          the item nor acknowledged it within the staleness window (a hand-over of an item
--          whose first put got no reply: that put may have run, and the item been delivered)
-- KEYS[7]  <prefix>{q<shard>}:done    sorted set: item id -> when it was acknowledged, ms
--          (Redis TIME), kept for the staleness window (queue_ack.lua)
-- Returns  1 written, 0 stale claim or (ARGV[9]) already known (nothing written), -1 shard
--          full (nothing written)
local id, fence = ARGV[1], ARGV[4]
local exists = redis.call('HEXISTS', KEYS[2], id) == 1
if ARGV[9] == '1' and (exists or redis.call('ZSCORE', KEYS[7], id)) then return 0 end
if fence ~= '0' then
  if not exists or redis.call('HGET', KEYS[3], id) ~= fence then return 0 end
elseif not exists and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[7]) then
  return -1
end
redis.call('HSET', KEYS[2], id, ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[3], id)
redis.call('ZADD', KEYS[4], ARGV[5], id)
redis.call('HDEL', KEYS[3], id)
if ARGV[8] == '' then
  redis.call('HDEL', KEYS[6], id)
else
  redis.call('HSET', KEYS[6], id, ARGV[8])
end
-- Bounded even when no replica ever claims again: the shard lives until its newest item is
-- past its staleness window (plus a margin), then goes.
local ttl = tonumber(ARGV[6])
for _, i in ipairs({1, 2, 3, 4, 6}) do
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return 1
