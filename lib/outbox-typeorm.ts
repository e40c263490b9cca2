/**
 * `nestjs-redis-tasks/outbox-typeorm`: the outbox table as a TypeORM entity, for apps whose migrations
 * TypeORM generates (add it to the data source's `entities`). It matches the shipped SQL migrations
 * (`migrations/outbox.postgres.sql`, `migrations/outbox.mysql.sql`); a test pins the columns.
 */
import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';

@Entity({ name: 'redis_task_outbox' })
export class RedisTaskOutboxEntity {
  /** The relay's order (ascending). */
  @PrimaryGeneratedColumn({ type: 'bigint' })
  id!: string;

  /** The task's id: its identity in Redis (a row relayed again writes nothing). */
  @Column({ name: 'task_id', type: 'text' })
  taskId!: string;

  @Column({ type: 'text' })
  pattern!: string;

  /** What picks the pattern's shard. */
  @Column({ name: 'shard_key', type: 'text' })
  shardKey!: string;

  /** The enqueue script's fields of the task, JSON (validated and encoded at emit time). */
  @Column({ type: 'text' })
  fields!: string;

  @CreateDateColumn({ name: 'created_at', precision: 3 })
  createdAt!: Date;

  /** Set on a row the relay could not read: left for an operator, never claimed again. */
  @Column({ type: 'text', nullable: true })
  error!: string | null;
}
