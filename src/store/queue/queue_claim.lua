-- queue_claim.lua: lease up to N due items. A claimed item's score moves to the lease end,
-- so if the claiming replica dies mid-attempt the item is due again when the lease runs
-- out; each claim writes a fresh fencing token, which ack and put must present.
-- KEYS     1 due  2 items  3 lease  4 born  5 aside  6 refs  7 done   (layout in queue_put.lua)
-- ARGV     1 now_ms  2 lease_until_ms  3 max items  4 fence base: a random integer the
--          claimer drew (1 to 2^40); the i-th item claimed gets base + i, so tokens never
--          repeat even after the shard's keys expire and counting would start over
--          5 '1': the same claim again, after its reply was lost: nothing is claimed, and the
--          items this claim leased (fence base + 1 .. base + max, still leased) are returned
-- Returns  {id1, item1, fence1, ref1, id2, item2, fence2, ref2, ...} (ref '' for none)
local out = {}
local base = tonumber(ARGV[4])
if ARGV[5] == '1' then
  local leased = redis.call('HGETALL', KEYS[3])
  local top = base + tonumber(ARGV[3])
  for i = 1, #leased, 2 do
    local fence = tonumber(leased[i + 1])
    local due = redis.call('ZSCORE', KEYS[1], leased[i])
    if fence and fence > base and fence <= top and due and tonumber(due) > tonumber(ARGV[1]) then
      local item = redis.call('HGET', KEYS[2], leased[i])
      if item then
        out[#out + 1] = leased[i]
        out[#out + 1] = item
        out[#out + 1] = leased[i + 1]
        out[#out + 1] = redis.call('HGET', KEYS[6], leased[i]) or ''
      end
    end
  end
  return out
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for i, id in ipairs(ids) do
  local item = redis.call('HGET', KEYS[2], id)
  if item then
    local fence = string.format('%d', base + i)
    redis.call('HSET', KEYS[3], id, fence)
    redis.call('ZADD', KEYS[1], ARGV[2], id)
    out[#out + 1] = id
    out[#out + 1] = item
    out[#out + 1] = fence
    out[#out + 1] = redis.call('HGET', KEYS[6], id) or ''
  else
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[4], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[6], id)
  end
end
return out
