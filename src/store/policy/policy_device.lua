-- policy_device.lua: what the per-device policy scripts share, put before each of them
-- (policy_admit, policy_rollback, policy_hold, policy_remember_env).

-- The flap record "<cooled or -> <last reminder> <last post> <forward>..." read into its
-- parts; a device without one has none cooled, zeros and no forwards.
local function flap_parts(s)
  local cooled, lrem, lpost, fw = nil, 0, 0, {}
  if not s then return cooled, lrem, lpost, fw end
  local n = 0
  for tok in string.gmatch(s, '%S+') do
    n = n + 1
    if n == 1 then
      if tok ~= '-' then cooled = tonumber(tok) end
    elseif n == 2 then
      lrem = tonumber(tok)
    elseif n == 3 then
      lpost = tonumber(tok)
    else
      fw[#fw + 1] = tonumber(tok)
    end
  end
  return cooled, lrem, lpost, fw
end

-- When the device's state was last written; a state idle for `horizon` is forgotten
-- first (nil: no state).
local function last_written(key, now, horizon)
  local w = tonumber(redis.call('HGET', key, 'w'))
  if w and now - w >= horizon then
    redis.call('DEL', key)
    return nil
  end
  return w
end

-- The instant to record as written: now, never moving back from `w`.
local function written_at(now, w)
  if w and w > now then return w end
  return now
end

