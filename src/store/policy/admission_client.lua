-- admission_client.lua (gcra.lua is prepended): one token from a client address's bucket shared by
-- every replica (GCRA, as the device bucket). Asked only for clients that spent more than a
-- quarter of a replica's own bucket (see src/admission/clients.rs).
--
-- KEYS[1]  <prefix>{c:<first 32 hex of SHA-256 of the address block>}: theoretical arrival
--          time, us
-- ARGV     1 now_ms  2 capacity  3 emission_us  4 ms the key outlives the bucket's refill
-- Returns  0 when a token was taken, else the whole seconds until one is back.

local now_us = tonumber(ARGV[1]) * 1000
local tat, retry = gcra_take(tonumber(redis.call('GET', KEYS[1])) or 0, now_us,
  tonumber(ARGV[3]), tonumber(ARGV[2]))
if retry > 0 then return retry end
redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.floor((tat - now_us) / 1000) + tonumber(ARGV[4]))
return 0
