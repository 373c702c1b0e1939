-- policy_admit.lua (gcra.lua is prepended): the whole admission of one envelope, atomically. A
-- line-for-line mirror of crate::policy::admit (src/policy/mod.rs is the readable specification; a differential
-- property test checks the two agree).
--
-- KEYS[1]  the device's hash: <prefix>{<first 32 hex of SHA-256(device token)>}
-- KEYS[2]  the device's tombstone: <prefix>{<same>}:dead, a reason code, with its own TTL
--          fields: w          last write, ms (never moves back)
--                  t          bucket theoretical arrival time (GCRA), us
--                  e          remembered APNs environment: "p" or "s"
--                  c:<id>     collapseId -> its last forward, ms
--                  h:<id>     collapseId -> held until, ms (its forward waits in the retry queue)
--                  f:<key>    flap key -> "<cooled_at|-> <last_reminder> <last_post> <t1> <t2>..."
-- ARGV     1 now_ms  2 collapseId  3 flap key  4 dedup_ms  5 flap_max_forwards
--          6 flap_window_ms  7 cooldown_ms  8 reset_ms  9 rate_capacity  10 emission_us
--          11 horizon_ms  12 ttl_ms  13 prune when the hash has more fields than this
--          14 clock skew margin, ms: pruning drops only what is dead at now - this, so a
--             replica whose clock lags finds nothing pruned that would still decide
-- Returns  {0, env, at_ms, kind, prev_reminder}  forward (kind 0 counted, 1 counted and
--                                                cooled the key, 2 reminder)
--          {1, env}                              coalesced
--          {2, env}                              suppressed
--          {3, env, retry_after_s}               rate limited
--          {4, '', reason_code}                  dead token (u, e or b)
-- Times are integers; they are written with %d because Lua's default number formatting
-- keeps only 14 significant digits.

local key = KEYS[1]
local now = tonumber(ARGV[1])
local cf = 'c:' .. ARGV[2]
local ff = 'f:' .. ARGV[3]
local dedup = tonumber(ARGV[4])
local flap_max = tonumber(ARGV[5])
local flap_window = tonumber(ARGV[6])
local cooldown = tonumber(ARGV[7])
local reset = tonumber(ARGV[8])
local capacity = tonumber(ARGV[9])
local emission = tonumber(ARGV[10])
local horizon = tonumber(ARGV[11])
local ttl = tonumber(ARGV[12])
local prune_over = tonumber(ARGV[13])
local skew = tonumber(ARGV[14])

local function fmt(n) return string.format('%d', n) end

local dead = redis.call('GET', KEYS[2])
if dead then
  return {4, '', dead}
end

local hf = 'h:' .. ARGV[2]
local h = redis.call('HMGET', key, 'w', 't', 'e', cf, ff, hf)
local w = tonumber(h[1])
if w and now - w >= horizon then
  -- Idle for the whole horizon: nothing stored still decides anything.
  redis.call('DEL', key)
  h = {false, false, false, false, false, false}
  w = nil
end
local env = h[3] or ''

-- The store's bookkeeping after a write: last-write instant, TTL, and, when the hash has
-- grown, dropping fields that no longer decide anything.
local function touch()
  local nw = now
  if w and w > nw then nw = w end
  redis.call('HSET', key, 'w', fmt(nw))
  redis.call('PEXPIRE', key, ttl)
  if redis.call('HLEN', key) > prune_over then
    local pnow = now - skew
    local all = redis.call('HGETALL', key)
    for i = 1, #all, 2 do
      local name, value = all[i], all[i + 1]
      local kind = string.sub(name, 1, 2)
      if kind == 'c:' then
        if pnow - tonumber(value) >= dedup then redis.call('HDEL', key, name) end
      elseif kind == 'h:' then
        if pnow >= tonumber(value) then redis.call('HDEL', key, name) end
      elseif kind == 'f:' then
        local n, c, lp, live = 0, nil, 0, false
        for tok in string.gmatch(value, '%S+') do
          n = n + 1
          if n == 1 then
            if tok ~= '-' then c = true end
          elseif n == 3 then
            lp = tonumber(tok)
          elseif n > 3 and pnow - tonumber(tok) < flap_window then
            live = true
          end
        end
        if c then live = pnow - lp < reset end
        if not live then redis.call('HDEL', key, name) end
      end
    end
  end
end

-- 1. Coalesce, measured from the last forward of this alert, or held while queued.
local last = tonumber(h[4])
if last and now - last < dedup then
  return {1, env}
end
local held = tonumber(h[6])
if held and now < held then
  return {1, env}
end

-- 2. Flap suppression.
local cooled, lrem, lpost, fw = flap_parts(h[5])
if cooled and now - lpost >= reset then
  cooled, lrem, lpost, fw = nil, 0, 0, {}
end

local function encode()
  local parts = {cooled and fmt(cooled) or '-', fmt(lrem), fmt(lpost)}
  for _, t in ipairs(fw) do parts[#parts + 1] = fmt(t) end
  return table.concat(parts, ' ')
end

local reminder = false
if cooled then
  if now - lrem < cooldown then
    if lpost < now then lpost = now end
    redis.call('HSET', key, ff, encode())
    touch()
    return {2, env}
  end
  reminder = true
else
  local kept = {}
  for _, t in ipairs(fw) do
    if now - t < flap_window then kept[#kept + 1] = t end
  end
  fw = kept
end

-- 3. Rate limit: GCRA, a token bucket as one instant (gcra.lua, prepended).
local tat, retry = gcra_take(tonumber(h[2]) or 0, now * 1000, emission, capacity)
if retry > 0 then
  return {3, env, retry}
end

-- Record the forward.
local new_last = now
if last and last > new_last then new_last = last end
if lpost < now then lpost = now end
local kind, prev = 0, 0
if reminder then
  prev = lrem
  if lrem < now then lrem = now end
  kind = 2
else
  fw[#fw + 1] = now
  if #fw >= flap_max then
    cooled = now
    if lrem < now then lrem = now end
    kind = 1
  end
end
redis.call('HSET', key, 't', fmt(tat), cf, fmt(new_last), ff, encode())
touch()
return {0, env, now, kind, prev}
