-- policy_hold.lua: hold an alert while its forward waits in the retry queue (duplicates keep
-- coalescing), or release it. Mirrors crate::policy::{hold, release}.
--
-- KEYS[1]  the device's hash (layout in policy_admit.lua)
-- ARGV     1 now_ms  2 collapseId  3 until_ms (0: release)  4 horizon_ms  5 ttl_ms

local key = KEYS[1]
local now = tonumber(ARGV[1])
local hf = 'h:' .. ARGV[2]
local until_ms = tonumber(ARGV[3])
local w = last_written(key, now, tonumber(ARGV[4]))
if until_ms == 0 then
  -- Release: nothing to do for a device with no state.
  if not w then return 0 end
  redis.call('HDEL', key, hf)
else
  local cur = tonumber(redis.call('HGET', key, hf))
  if cur and cur > until_ms then until_ms = cur end
  redis.call('HSET', key, hf, string.format('%d', until_ms))
end
redis.call('HSET', key, 'w', string.format('%d', written_at(now, w)))
redis.call('PEXPIRE', key, tonumber(ARGV[5]))
return 1
