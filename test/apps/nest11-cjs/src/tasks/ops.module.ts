import { Module } from '@nestjs/common';
import { RedisTaskModule } from 'nestjs-redis-tasks';
import { OpsController } from './ops.controller';
import { tasksConnection } from './tasks.module';

/** The admin routes of OpsController (the e2e test mounts it next to AppModule). */
@Module({
  imports: [RedisTaskModule.forRootAsync({ useFactory: tasksConnection })],
  controllers: [OpsController],
})
export class OpsModule {}
