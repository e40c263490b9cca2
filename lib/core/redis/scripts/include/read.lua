-- include/read.lua — reads that broken data never fails, for the read-only scripts (readOverview,
-- countUnreachable; their headers say "Includes: read").
-- read(command, key, ...)
--   The reply of a read command, or nil when Redis refused it (the key holds another type: nothing of ours
--   to read there).
local function read(command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    return nil
  end
  return reply
end
