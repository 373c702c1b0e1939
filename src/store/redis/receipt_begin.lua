-- receipt_begin.lua: create a signed push's receipt, or find the one its id already has.
-- Mirrors crate::store::receipts::begin.
-- KEYS[1]  <prefix>{r:<push id>}      hash: h canonical hash, k signer, t topic, c created,
--                                     u updated, s settled (0/1), n last event sequence,
--                                     o target keys in request order (comma-separated),
--                                     x:<target> "<state>|<updated ms>|<detail JSON>"
-- KEYS[2]  <prefix>{r:<push id>}:ev   list: events "<seq>|<kind>|<at ms>|<target>|<state>"
-- ARGV     1 canonical hash  2 signer  3 topic  4 now_ms  5 ttl_ms  6 targets, comma-separated
-- Returns  {0} new (the caller builds the same receipt itself), {1, HGETALL, LRANGE}
--          replay, {2} conflict
local h = redis.call('HGET', KEYS[1], 'h')
if h then
  if h ~= ARGV[1] then return {2} end
  return {1, redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1)}
end
local now = ARGV[4]
redis.call('HSET', KEYS[1], 'h', ARGV[1], 'k', ARGV[2], 't', ARGV[3], 'c', now, 'u', now,
  's', '0', 'n', '1', 'o', ARGV[6])
for target in string.gmatch(ARGV[6], '[^,]+') do
  redis.call('HSET', KEYS[1], 'x:' .. target, 'accepted|' .. now .. '|')
end
redis.call('RPUSH', KEYS[2], '1|accepted|' .. now .. '||')
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return {0}
