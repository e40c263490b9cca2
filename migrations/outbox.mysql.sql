-- nestjs-redis-tasks: the transactional outbox's table (README "Enqueue inside a transaction").
-- Rename the table if you like and pass the name as RedisTaskOutboxModule.forRoot({ table }).
CREATE TABLE IF NOT EXISTS redis_task_outbox (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  task_id TEXT NOT NULL,
  pattern TEXT NOT NULL,
  shard_key TEXT NOT NULL,
  fields LONGTEXT NOT NULL,
  created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  error TEXT NULL
) ENGINE=InnoDB;
