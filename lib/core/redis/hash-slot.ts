/**
 * Redis Cluster's key-to-slot mapping (CRC16/XMODEM of the hash tag, modulo 16384), so the key layout
 * can place shards on different parts of the slot space and check itself against `CLUSTER KEYSLOT`.
 */
export const SLOT_COUNT = 16_384;

const TABLE = (() => {
  const table = new Uint16Array(256);
  for (let byte = 0; byte < 256; byte++) {
    let crc = byte << 8;
    for (let bit = 0; bit < 8; bit++) {
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    table[byte] = crc;
  }
  return table;
})();

function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) {
    crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ byte) & 0xff];
  }
  return crc;
}

/** The cluster slot of a key: only the part inside the first non-empty `{…}` counts when there is one. */
export function hashSlot(key: string): number {
  const open = key.indexOf('{');
  if (open !== -1) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) {
      key = key.slice(open + 1, close);
    }
  }
  return crc16(Buffer.from(key, 'utf8')) % SLOT_COUNT;
}

/** A stable 32-bit FNV-1a hash (the shard a client id lives in). */
export function fnv1a(value: string): number {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(value, 'utf8')) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}
