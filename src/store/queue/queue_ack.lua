-- queue_ack.lua: remove an item (delivered, given up, or expired) as its current claimer,
-- or move it aside when it cannot be opened (kept for the operator, never silently lost).
-- KEYS     1 due  2 items  3 lease  4 born  5 aside   (layout in queue_put.lua)
-- ARGV     1 id  2 fence (0: unconditional)  3 aside: 1 to move it there instead of deleting
--          4 aside_ttl_ms
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
return 1
