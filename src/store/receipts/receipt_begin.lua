-- receipt_begin.lua: create a signed push's receipt and its lease, or find the one its id
-- already has (taking the lease when it is the caller's own or has lapsed while a target is
-- still accepted). Mirrors crate::signed::receipt::lifecycle::begin and take.
-- KEYS[1]  <prefix>{r:<push id>}      hash: h canonical hash, k signer, t topic, c created,
--                                     u updated, s settled (0/1), n last event sequence,
--                                     o target keys in request order (comma-separated),
--                                     x:<target> "<state>|<updated ms>|<detail JSON>",
--                                     w lease "<owner token>|<until, Redis TIME ms>"
-- KEYS[2]  <prefix>{r:<push id>}:ev   list: events "<seq>|<kind>|<at ms>|<target>|<state>"
-- KEYS[3]  <prefix>{r:<push id>}:kept the request, sealed, for a taker of the lease
-- ARGV     1 canonical hash  2 signer  3 topic  4 now_ms  5 ttl_ms  6 targets, comma-separated
--          7 owner token  8 lease ms  9 the sealed request (empty: none kept)  10 how long
--          it is kept, ms
-- Returns  {0} new (the caller builds the same receipt itself), {1, HGETALL, LRANGE, owned
--          0/1} replay, {2} conflict
local t = redis.call('TIME')
local clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = ARGV[7] .. '|' .. string.format('%d', clock + tonumber(ARGV[8]))
local h = redis.call('HGET', KEYS[1], 'h')
if h then
  if h ~= ARGV[1] then return {2} end
  local owned = 0
  local accepted = false
  for target in string.gmatch(redis.call('HGET', KEYS[1], 'o'), '[^,]+') do
    local cur = redis.call('HGET', KEYS[1], 'x:' .. target)
    if cur and string.match(cur, '^([^|]*)') == 'accepted' then accepted = true break end
  end
  if accepted then
    local w = redis.call('HGET', KEYS[1], 'w') or '|0'
    local owner, untils = string.match(w, '^([^|]*)|(.*)$')
    if owner == ARGV[7] or clock >= (tonumber(untils) or 0) then
      redis.call('HSET', KEYS[1], 'w', lease)
      owned = 1
    end
  end
  return {1, redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1), owned}
end
local now = ARGV[4]
redis.call('HSET', KEYS[1], 'h', ARGV[1], 'k', ARGV[2], 't', ARGV[3], 'c', now, 'u', now,
  's', '0', 'n', '1', 'o', ARGV[6], 'w', lease)
for target in string.gmatch(ARGV[6], '[^,]+') do
  redis.call('HSET', KEYS[1], 'x:' .. target, 'accepted|' .. now .. '|')
end
redis.call('RPUSH', KEYS[2], '1|accepted|' .. now .. '||')
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
if ARGV[9] ~= '' and tonumber(ARGV[10]) > 0 then
  redis.call('SET', KEYS[3], ARGV[9], 'PX', ARGV[10])
end
return {0}
