import { Injectable } from '@nestjs/common';

/** Where the avatar handler records its work (a real app would resize and store the image). */
@Injectable()
export class AvatarService {
  readonly resized: number[] = [];

  resize(userId: number): void {
    this.resized.push(userId);
  }
}
