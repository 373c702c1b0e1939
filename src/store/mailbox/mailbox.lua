-- mailbox.lua (gcra.lua is prepended): one mailbox request, atomically: the bearer check,
-- the bucket token, the operation. Mirrors crate::mailbox::state (a differential test binds
-- the two).
--
-- KEYS     1 <prefix>{mb:<name>}          hash: b bearer SHA-256 hex; g the claim's
--                                         generation (now_ms of the claim that made it,
--                                         named by every event); t:<bucket> arrival
--                                         times (us); r:<dir> sealed push registration;
--                                         f:<dir> foreground until (ms); o:<side> the
--                                         side's newest signal socket (a count); c:<side>
--                                         frames charged to its two latest spending
--                                         sockets
--          2 <prefix>{mb:<name>}:e:p2c    hash: seq -> envelope bytes
--          3 <prefix>{mb:<name>}:e:c2p
--          4 <prefix>{mb:<name>}:s:p2c    sorted set: seq (score = seq)
--          5 <prefix>{mb:<name>}:s:c2p
-- ARGV     1 op  2 bearer hash  3 now_ms, or empty for the store's own clock (TIME: what
--          the relay sends, so no replica's wall clock decides a bucket, a foreground
--          window or a generation)  4 idle_ms  5 max envelopes per direction
--          6 channel (<prefix>{mb:<name>}:ev)  7.. the op's arguments
-- Returns  {code, ...}: 0 not found, 1 forbidden, {2, retry s} rate limited, 3 created,
--          4 claimed, {5, push code, registration} stored (push: 0 not asked, 1 foreground,
--          2 throttled, 3 no registration, 4 send), 6 same, 7 conflict, 8 full,
--          {9, last, more, seq, data, ...} listed, {10, data or false} got,
--          {11, last, count} head, 12 done, {13, socket number, generation} signal open,
--          {14, generation} watch open, check or signal spend, 15 pruned a batch, more
--          left, 16 replaced (a newer signal socket of the side opened).
local op, bearer, now, idle = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local meta = KEYS[1]
local MAX_LIST_BYTES = 1048576
local rates = {
  ['t:env'] = {120, 500000}, ['t:read'] = {240, 250000}, ['t:ws'] = {20, 5000000},
  ['t:sig:primary'] = {400, 20000}, ['t:sig:companion'] = {400, 20000},
  ['t:push:p2c'] = {20, 2000000}, ['t:push:c2p'] = {20, 2000000},
  ['t:reg'] = {10, 60000000}, ['t:ice'] = {6, 30000000},
}
local buckets = {
  claim = 't:read', erase = 't:read', list = 't:read', get = 't:read', head = 't:read',
  prune = 't:read', put = 't:env', register = 't:reg', unregister = 't:reg', socket = 't:ws',
  sigopen = 't:ws', ice = 't:ice',
}
local function take(field)
  local r = rates[field]
  local tat, retry = gcra_take(tonumber(redis.call('HGET', meta, field)) or 0, now * 1000, r[2], r[1])
  if retry == 0 then redis.call('HSET', meta, field, string.format('%d', tat)) end
  return retry
end
local function touch()
  for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], idle) end
end
local function generation()
  return redis.call('HGET', meta, 'g') or '0'
end
local function publish(payload)
  redis.call('SPUBLISH', ARGV[6], string.format('%d', now) .. '\n' .. payload .. ' @' .. generation())
end
local function dir_keys(dir)
  if dir == 'p2c' then return KEYS[2], KEYS[4] end
  return KEYS[3], KEYS[5]
end
local function last_of(set)
  local top = redis.call('ZRANGE', set, 0, 0, 'REV')
  if #top == 0 then return '0' end
  return top[1]
end

local holder = redis.call('HGET', meta, 'b')
if not holder then
  if op ~= 'claim' then return {0} end
  redis.call('HSET', meta, 'b', bearer, 'g', string.format('%d', now))
  take('t:read')
  redis.call('PEXPIRE', meta, idle)
  return {3}
end
if holder ~= bearer then return {1} end
local field = buckets[op]
if field then
  local retry = take(field)
  if retry > 0 then return {2, retry} end
end

if op == 'claim' then
  touch()
  return {4}
elseif op == 'erase' then
  local g = generation()
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
  redis.call('SPUBLISH', ARGV[6], string.format('%d', now) .. '\nerase @' .. g)
  return {12}
elseif op == 'put' then
  local dir, seq, data, notify = ARGV[7], ARGV[8], ARGV[9], ARGV[10]
  local e, s = dir_keys(dir)
  local have = redis.call('HGET', e, seq)
  if have then
    if have == data then return {6} end
    return {7}
  end
  if redis.call('ZCARD', s) >= tonumber(ARGV[5]) then return {8} end
  redis.call('HSET', e, seq, data)
  redis.call('ZADD', s, seq, seq)
  local push, reg = 0, false
  if notify == '1' then
    local reg_now = redis.call('HGET', meta, 'r:' .. dir)
    if (tonumber(redis.call('HGET', meta, 'f:' .. dir)) or 0) > now then
      push = 1
    elseif not reg_now then
      push = 3
    elseif take('t:push:' .. dir) > 0 then
      push = 2
    else
      push, reg = 4, reg_now
    end
  end
  touch()
  publish('seq ' .. dir .. ' ' .. seq)
  return {5, push, reg}
elseif op == 'list' then
  local e, s = dir_keys(ARGV[7])
  local limit = tonumber(ARGV[9])
  local out = {9, last_of(s), 0}
  local seqs = redis.call('ZRANGE', s, '(' .. ARGV[8], '+inf', 'BYSCORE', 'LIMIT', 0, limit + 1)
  local bytes, count = 0, 0
  for _, seq in ipairs(seqs) do
    local data = redis.call('HGET', e, seq)
    if count == limit or bytes + #data > MAX_LIST_BYTES then
      out[3] = 1
      break
    end
    bytes, count = bytes + #data, count + 1
    out[#out + 1] = seq
    out[#out + 1] = data
  end
  return out
elseif op == 'get' then
  local e = dir_keys(ARGV[7])
  return {10, redis.call('HGET', e, ARGV[8])}
elseif op == 'head' then
  local _, s = dir_keys(ARGV[7])
  return {11, last_of(s), redis.call('ZCARD', s)}
elseif op == 'prune' or op == 'prunemore' then
  -- At most PRUNE_BATCH (the lowest) per call, so no call holds Redis long; 15: more left.
  local e, s = dir_keys(ARGV[7])
  local gone = redis.call('ZRANGE', s, '-inf', ARGV[8], 'BYSCORE', 'LIMIT', 0, 1000)
  if #gone > 0 then
    redis.call('HDEL', e, unpack(gone))
    redis.call('ZREM', s, unpack(gone))
  end
  if redis.call('ZCOUNT', s, '-inf', ARGV[8]) > 0 then return {15} end
  return {12}
elseif op == 'register' then
  redis.call('HSET', meta, 'r:' .. ARGV[7], ARGV[8])
  return {12}
elseif op == 'unregister' then
  redis.call('HDEL', meta, 'r:' .. ARGV[7])
  return {12}
elseif op == 'forget' then
  if redis.call('HGET', meta, 'r:' .. ARGV[7]) == ARGV[8] then
    redis.call('HDEL', meta, 'r:' .. ARGV[7])
  end
  return {12}
elseif op == 'ping' then
  redis.call('HSET', meta, 'f:' .. ARGV[7], string.format('%d', now + 45000))
  return {12}
elseif op == 'unping' then
  redis.call('HDEL', meta, 'f:' .. ARGV[7])
  return {12}
elseif op == 'ice' then
  return {12}
elseif op == 'socket' or op == 'check' then
  return {14, generation()}
elseif op == 'sigopen' then
  return {13, redis.call('HINCRBY', meta, 'o:' .. ARGV[7], 1), generation()}
elseif op == 'sigspend' then
  -- ARGV[8] the socket's number, ARGV[9] the frames it relayed since it opened. The relayed
  -- frames are spent whether or not the socket was replaced meanwhile; only those not charged
  -- yet, so a spend sent again after a lost reply charges nothing twice. c:<side> keeps what
  -- the side's two latest spending sockets were charged: "socket|frames|socket|frames".
  local field = 'c:' .. ARGV[7]
  local socket, relayed = tonumber(ARGV[8]), tonumber(ARGV[9])
  local c = {0, 0, 0, 0}
  local i = 1
  for v in string.gmatch(redis.call('HGET', meta, field) or '', '[^|]+') do
    c[i] = tonumber(v)
    i = i + 1
  end
  local due = relayed
  if socket == c[1] then
    due = math.max(0, relayed - c[2])
    c[2] = math.max(c[2], relayed)
  elseif socket == c[3] then
    due = math.max(0, relayed - c[4])
    c[4] = math.max(c[4], relayed)
  elseif socket > c[1] then
    c = {socket, relayed, c[1], c[2]}
  end
  redis.call('HSET', meta, field, string.format('%d|%d|%d|%d', c[1], c[2], c[3], c[4]))
  for _ = 1, due do
    local retry = take('t:sig:' .. ARGV[7])
    if retry > 0 then return {2, retry} end
  end
  if (redis.call('HGET', meta, 'o:' .. ARGV[7]) or '0') ~= ARGV[8] then return {16} end
  return {14, generation()}
end
return redis.error_reply('mailbox.lua: unknown op ' .. tostring(op))
