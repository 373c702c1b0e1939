-- policy_rollback.lua: undo exactly one admitted forward that APNs refused (at once, or finally
-- from the retry queue). Mirrors crate::policy::rollback. The bucket token is not refunded;
-- any hold on the alert ends.
--
-- KEYS[1]  the device's hash (layout in policy_admit.lua)
-- ARGV     1 now_ms  2 collapseId  3 flap key  4 at_ms (the forward's instant)
--          5 kind (0 counted, 1 counted and cooled, 2 reminder)  6 prev_reminder_ms
--          7 horizon_ms  8 ttl_ms
-- Returns  1 if the device's state was still there, else 0.

local key = KEYS[1]
local now = tonumber(ARGV[1])
local cf = 'c:' .. ARGV[2]
local ff = 'f:' .. ARGV[3]
local at = tonumber(ARGV[4])
local kind = tonumber(ARGV[5])
local prev = tonumber(ARGV[6])
local horizon = tonumber(ARGV[7])
local ttl = tonumber(ARGV[8])

local function fmt(n) return string.format('%d', n) end

local h = redis.call('HMGET', key, 'w', cf, ff)
local w = tonumber(h[1])
if not w then return 0 end
if now - w >= horizon then
  redis.call('DEL', key)
  return 0
end

if tonumber(h[2]) == at then redis.call('HDEL', key, cf) end
redis.call('HDEL', key, 'h:' .. ARGV[2])

if h[3] then
  local cooled, lrem, lpost, fw = flap_parts(h[3])
  if kind == 2 then
    if lrem == at then lrem = prev end
  else
    for i, t in ipairs(fw) do
      if t == at then
        table.remove(fw, i)
        break
      end
    end
    -- Only the forward that cooled the key uncools it (another forward of the same
    -- millisecond has the same instant but cooled nothing).
    if kind == 1 and cooled == at then cooled = nil end
  end
  local parts = {cooled and fmt(cooled) or '-', fmt(lrem), fmt(lpost)}
  for _, t in ipairs(fw) do parts[#parts + 1] = fmt(t) end
  redis.call('HSET', key, ff, table.concat(parts, ' '))
end

local nw = now
if w > nw then nw = w end
redis.call('HSET', key, 'w', fmt(nw))
redis.call('PEXPIRE', key, ttl)
return 1
