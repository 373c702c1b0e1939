-- receipt_update.lua: apply target changes to a receipt, append their events and, once no
-- target is pending, the settled event; publish the new events on the push's channel.
-- Mirrors crate::signed::receipt::lifecycle::update (apply).
-- KEYS     1 the receipt hash  2 its event list   (layout in receipt_begin.lua)
-- ARGV     1 now_ms  2 ttl_ms  3 channel (<prefix>{r:<push id>}:events)
--          4 guard: 1 applies only once the lease has lapsed (Redis TIME), 0 always
--          5.. triples: target, state, detail JSON
-- Returns  {0} when the receipt is gone, {2} when the guard holds, else {1, the last event
-- sequence before the update} (the caller, holding the receipt as it was, applies the same
-- changes itself).
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
if ARGV[4] == '1' then
  local t = redis.call('TIME')
  local clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local untils = string.match(redis.call('HGET', KEYS[1], 'w') or '|0', '|(.*)$')
  if clock < (tonumber(untils) or 0) then return {2} end
end
local now = ARGV[1]
local pending = {accepted = true, queued = true}
local function may_become(from, to)
  if from == 'accepted' then return to ~= 'accepted' end
  if from == 'queued' then
    return to == 'delivered' or to == 'rejected' or to == 'failed' or to == 'expired'
  end
  return false
end
local n = tonumber(redis.call('HGET', KEYS[1], 'n'))
local before = n
local new = {}
for i = 5, #ARGV, 3 do
  local target, state, detail = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local cur = redis.call('HGET', KEYS[1], 'x:' .. target)
  if cur then
    local from = string.match(cur, '^([^|]*)')
    if may_become(from, state) then
      redis.call('HSET', KEYS[1], 'x:' .. target, state .. '|' .. now .. '|' .. detail)
      n = n + 1
      new[#new + 1] = string.format('%d', n) .. '|target|' .. now .. '|' .. target .. '|' .. state
    end
  end
end
if redis.call('HGET', KEYS[1], 's') == '0' then
  local all_done = true
  for target in string.gmatch(redis.call('HGET', KEYS[1], 'o'), '[^,]+') do
    local cur = redis.call('HGET', KEYS[1], 'x:' .. target)
    if cur and pending[string.match(cur, '^([^|]*)')] then all_done = false break end
  end
  if all_done then
    redis.call('HSET', KEYS[1], 's', '1')
    n = n + 1
    new[#new + 1] = string.format('%d', n) .. '|settled|' .. now .. '||'
  end
end
if #new > 0 then
  redis.call('HSET', KEYS[1], 'n', string.format('%d', n))
  if tonumber(redis.call('HGET', KEYS[1], 'u')) < tonumber(now) then
    redis.call('HSET', KEYS[1], 'u', now)
  end
  redis.call('RPUSH', KEYS[2], unpack(new))
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  -- One message for the new events, framed like every fan-out message: the publish instant,
  -- a newline, the payload (events separated by newlines).
  redis.call('SPUBLISH', ARGV[3], now .. '\n' .. table.concat(new, '\n'))
end
return {1, before}
