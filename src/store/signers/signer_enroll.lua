-- signer_enroll.lua: enrol a signer or update it (a revoked one becomes active again, keeping
-- its creation time), and tell every replica. Mirrors crate::signed::enrolment::enroll.
-- KEYS[1]  <prefix>{signers}:<key id>   hash: pk public key, tp topics (newline-separated),
--                                       c created, u updated, r revoked (absent while active)
-- KEYS[2]  <prefix>{signers}:index      set of key ids
-- ARGV     1 key id  2 public key  3 topics  4 now_ms  5 channel
-- Returns  {0 created | 1 updated, HGETALL}
local existed = redis.call('EXISTS', KEYS[1])
local c = redis.call('HGET', KEYS[1], 'c') or ARGV[4]
redis.call('HSET', KEYS[1], 'pk', ARGV[2], 'tp', ARGV[3], 'c', c, 'u', ARGV[4])
redis.call('HDEL', KEYS[1], 'r')
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('PUBLISH', ARGV[5], ARGV[4] .. '\n' .. ARGV[1])
return {existed, redis.call('HGETALL', KEYS[1])}
