-- queue_ack.lua: remove an item (delivered, given up, or expired) as its current claimer,
-- or move it aside when it cannot be opened (kept for the operator, never silently lost).
-- The id is remembered (KEYS[7]) for the window, so a hand-over of a copy whose first put got
-- no reply cannot bring a delivered item back.
-- KEYS     1 due  2 items  3 lease  4 born  5 aside  6 refs  7 done   (layout in queue_put.lua)
-- ARGV     1 id  2 fence (0: unconditional)  3 aside: 1 to move it there instead of deleting
--          4 aside_ttl_ms  5 how long an acknowledged id is remembered, ms  6 at most this
--          many remembered per shard
-- Returns  1 done, 0 stale claim (nothing changed)
local id, fence = ARGV[1], ARGV[2]
if fence ~= '0' and redis.call('HGET', KEYS[3], id) ~= fence then return 0 end
if ARGV[3] == '1' then
  local item = redis.call('HGET', KEYS[2], id)
  if item then
    redis.call('HSET', KEYS[5], id, item)
    redis.call('PEXPIRE', KEYS[5], tonumber(ARGV[4]))
  end
end
redis.call('ZREM', KEYS[1], id)
redis.call('ZREM', KEYS[4], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
redis.call('HDEL', KEYS[6], id)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[5])
redis.call('ZADD', KEYS[7], now, id)
redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now - window)
redis.call('ZREMRANGEBYRANK', KEYS[7], 0, -(tonumber(ARGV[6]) + 1))
redis.call('PEXPIRE', KEYS[7], window)
return 1
