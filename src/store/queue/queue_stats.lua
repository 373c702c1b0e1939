-- queue_stats.lua: one shard's depth, its oldest acceptance, and items set aside.
-- KEYS     1 due  2 items  3 lease  4 born  5 aside  6 refs  7 done   (layout in queue_put.lua)
-- Returns  {depth, oldest accepted_ms or -1, aside count}
local oldest = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
local o = -1
if oldest[2] then o = tonumber(oldest[2]) end
return {redis.call('ZCARD', KEYS[1]), o, redis.call('HLEN', KEYS[5])}
