-- policy_hold.lua: hold an alert while its forward waits in the retry queue (duplicates keep
-- coalescing), or release it. Mirrors crate::policy::{hold, release}.
--
-- KEYS[1]  the device's hash (layout in policy_admit.lua)
-- ARGV     1 now_ms  2 collapseId  3 until_ms (0: release)  4 horizon_ms  5 ttl_ms

local key = KEYS[1]
local now = tonumber(ARGV[1])
local hf = 'h:' .. ARGV[2]
local until_ms = tonumber(ARGV[3])
local horizon = tonumber(ARGV[4])
local w = tonumber(redis.call('HGET', key, 'w'))
if w and now - w >= horizon then
  redis.call('DEL', key)
  w = nil
end
if until_ms == 0 then
  -- Release: nothing to do for a device with no state.
  if not w then return 0 end
  redis.call('HDEL', key, hf)
else
  local cur = tonumber(redis.call('HGET', key, hf))
  if cur and cur > until_ms then until_ms = cur end
  redis.call('HSET', key, hf, string.format('%d', until_ms))
end
local nw = now
if w and w > nw then nw = w end
redis.call('HSET', key, 'w', string.format('%d', nw))
redis.call('PEXPIRE', key, tonumber(ARGV[5]))
return 1
