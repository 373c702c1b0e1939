-- receipt_get.lua: a receipt's fields and events in one round trip.
-- KEYS     1 the receipt hash  2 its event list   (layout in receipt_begin.lua)
-- Returns  {HGETALL, LRANGE}
return {redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1)}
