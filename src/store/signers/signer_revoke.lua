-- signer_revoke.lua: revoke a signer (the first revocation's time stays) and tell every
-- replica. Mirrors crate::signed::enrolment::revoke.
-- KEYS     1 the signer's hash  (layout in signer_enroll.lua)
-- ARGV     1 key id  2 now_ms  3 channel
-- Returns  {} for an unknown key id, else HGETALL
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
if redis.call('HEXISTS', KEYS[1], 'r') == 0 then
  redis.call('HSET', KEYS[1], 'r', ARGV[2], 'u', ARGV[2])
end
redis.call('PUBLISH', ARGV[3], ARGV[2] .. '\n' .. ARGV[1])
return redis.call('HGETALL', KEYS[1])
