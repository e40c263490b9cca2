-- nestjs-redis-tasks: the transactional outbox's table (README "Enqueue inside a transaction").
-- Rename the table if you like and pass the name as RedisTaskOutboxModule.forRoot({ table }).
CREATE TABLE IF NOT EXISTS redis_task_outbox (
  id BIGSERIAL PRIMARY KEY,
  task_id TEXT NOT NULL,
  pattern TEXT NOT NULL,
  shard_key TEXT NOT NULL,
  fields TEXT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  error TEXT
);
