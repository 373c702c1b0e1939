-- gcra.lua: one token from a GCRA bucket (a token bucket kept as its theoretical arrival
-- time, microseconds). The mirror of crate::policy::gcra_take, prepended to every script
-- that takes a token so there is one Lua definition; a differential test binds the two.
-- Returns (new_tat, 0) when a token was taken, else (tat, whole seconds until one is back,
-- at least 1). Values stay below 2^53 (see src/policy/gcra.rs), so doubles are exact.
local function gcra_take(tat, now_us, emission, capacity)
  if tat < now_us then tat = now_us end
  local tolerance = emission * (capacity - 1)
  if tat - now_us > tolerance then
    local retry = math.floor((tat - now_us - tolerance + 999999) / 1000000)
    if retry < 1 then retry = 1 end
    return tat, retry
  end
  return tat + emission, 0
end

