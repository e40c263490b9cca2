import { Module } from '@nestjs/common';
import { RedisTaskModule } from 'nestjs-redis-tasks';
import { AvatarService } from './avatar.service.js';
import { AvatarsController } from './avatars.controller.js';

/** Where Redis is, and the key prefix: from the environment, read when the module starts. */
export function tasksConnection() {
  return { connection: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix: process.env.TASKS_PREFIX ?? 'tasks' };
}

@Module({
  imports: [RedisTaskModule.forRootAsync({ useFactory: tasksConnection })],
  controllers: [AvatarsController],
  providers: [AvatarService],
})
export class TasksModule {}
