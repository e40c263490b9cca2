import { Module } from '@nestjs/common';
import { AvatarsController } from './avatars.controller.js';
import { Progress } from './progress.js';

@Module({ controllers: [AvatarsController], providers: [Progress] })
export class WorkerModule {}
