-- signer_list.lua: every signer.
-- KEYS     1 <prefix>{signers}:index
-- ARGV     1 the key prefix of signer hashes (<prefix>{signers}:)
-- Returns  {key id, HGETALL, key id, HGETALL, ...}
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local h = redis.call('HGETALL', ARGV[1] .. id)
  if #h > 0 then
    out[#out + 1] = id
    out[#out + 1] = h
  end
end
return out
