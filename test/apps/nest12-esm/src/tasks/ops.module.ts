import { Module } from '@nestjs/common';
import { RedisTaskModule } from 'nestjs-redis-tasks';
import { OpsController } from './ops.controller.js';
import { tasksConnection } from './tasks.module.js';

/** The admin routes of OpsController (the e2e test mounts it next to AppModule). */
@Module({
  imports: [RedisTaskModule.forRootAsync({ useFactory: tasksConnection })],
  controllers: [OpsController],
})
export class OpsModule {}
