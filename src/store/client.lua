-- client.lua: one token from a client address's bucket shared by every replica (GCRA, as
-- the device bucket). Asked only for clients that spent more than a quarter of a replica's
-- own bucket (see src/clients.rs).
--
-- KEYS[1]  <prefix>{c:<first 32 hex of SHA-256 of the address block>}: theoretical arrival
--          time, us
-- ARGV     1 now_ms  2 capacity  3 emission_us
-- Returns  0 when a token was taken, else the whole seconds until one is back.

local now_us = tonumber(ARGV[1]) * 1000
local capacity = tonumber(ARGV[2])
local emission = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1])) or 0
if tat < now_us then tat = now_us end
local tolerance = emission * (capacity - 1)
if tat - now_us > tolerance then
  local retry = math.floor((tat - now_us - tolerance + 999999) / 1000000)
  if retry < 1 then retry = 1 end
  return retry
end
tat = tat + emission
redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.floor((tat - now_us) / 1000) + 1000)
return 0
