import { Injectable, Logger, Module } from '@nestjs/common';
import { firstValueFrom } from 'rxjs';
import { RedisTaskClient, RedisTaskModule, RedisTaskRecordBuilder } from '../lib/index.js';

/** The producer side: an injected RedisTaskClient, used the way a Nest service would. */
@Injectable()
export class ProfileService {
  private readonly logger = new Logger(ProfileService.name);

  constructor(private readonly tasks: RedisTaskClient) {}

  /** A tenant uploading many avatars at once: one round trip for the whole batch. */
  async bulkUpload(tenant: string, users: number[]): Promise<void> {
    await this.tasks.emitBatch(
      'avatar.resize',
      users.map((userId) => new RedisTaskRecordBuilder({ userId, size: 256 }).setClientId(tenant).build()),
    );
    this.logger.log(`tenant "${tenant}" enqueued ${users.length} avatar tasks`);
  }

  /** One upload: completes once Redis has the task. */
  async upload(tenant: string, userId: number): Promise<void> {
    const record = new RedisTaskRecordBuilder({ userId, size: 128 }).setClientId(tenant).build();
    const receipt = await firstValueFrom(this.tasks.emit('avatar.resize', record));
    this.logger.log(`tenant "${tenant}" enqueued avatar task ${receipt.id.slice(0, 8)}`);
  }

  /** Request/response through the queue: resolves with the handler's result. */
  renderInvoice(number: string): Promise<{ url: string }> {
    return firstValueFrom(this.tasks.send<{ url: string }>('invoice.render', { number }));
  }
}

export function apiModule(connection: string) {
  @Module({
    imports: [RedisTaskModule.forRoot({ connection, prefix: 'sample', clientId: 'web' })],
    providers: [ProfileService],
  })
  class ApiModule {}
  return ApiModule;
}
