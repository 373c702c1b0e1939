-- policy_remember_env.lua: remember the APNs environment a device worked on.
--
-- KEYS[1]  the device's hash (layout in policy_admit.lua)
-- ARGV     1 now_ms  2 environment ("p" or "s")  3 horizon_ms  4 ttl_ms

local key = KEYS[1]
local now = tonumber(ARGV[1])
local horizon = tonumber(ARGV[3])
local w = tonumber(redis.call('HGET', key, 'w'))
if w and now - w >= horizon then
  redis.call('DEL', key)
  w = nil
end
local nw = now
if w and w > nw then nw = w end
redis.call('HSET', key, 'e', ARGV[2], 'w', string.format('%d', nw))
redis.call('PEXPIRE', key, tonumber(ARGV[4]))
return 1
