-- claim.lua: lease up to N due items. A claimed item's score moves to the lease end, so if
-- the claiming replica dies mid-attempt the item is due again when the lease runs out.
-- KEYS[1]  <prefix>{q<shard>}:due    (layout in put.lua)
-- KEYS[2]  <prefix>{q<shard>}:items
-- ARGV     1 now_ms  2 lease_until_ms  3 max items
-- Returns  {id1, item1, id2, item2, ...}
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, id in ipairs(ids) do
  local item = redis.call('HGET', KEYS[2], id)
  if item then
    redis.call('ZADD', KEYS[1], ARGV[2], id)
    out[#out + 1] = id
    out[#out + 1] = item
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
