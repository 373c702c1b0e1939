-- policy_remember_env.lua: remember the APNs environment a device worked on.
--
-- KEYS[1]  the device's hash (layout in policy_admit.lua)
-- ARGV     1 now_ms  2 environment ("p" or "s")  3 horizon_ms  4 ttl_ms

local key = KEYS[1]
local now = tonumber(ARGV[1])
local w = last_written(key, now, tonumber(ARGV[3]))
redis.call('HSET', key, 'e', ARGV[2], 'w', string.format('%d', written_at(now, w)))
redis.call('PEXPIRE', key, tonumber(ARGV[4]))
return 1
