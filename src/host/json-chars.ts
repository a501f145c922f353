/** UTF-16 code units of JSON's structural characters, for the readers that scan JSON text as it streams. */
export const QUOTE = 0x22;
export const BACKSLASH = 0x5c;
export const OPEN_ARRAY = 0x5b;
export const CLOSE_ARRAY = 0x5d;
export const OPEN_OBJECT = 0x7b;
export const CLOSE_OBJECT = 0x7d;
export const COMMA = 0x2c;
export const COLON = 0x3a;

/** JSON's whitespace: space, line feed, carriage return, tab. */
export function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}
