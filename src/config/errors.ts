/**
 * Errors and warnings about a configuration. Both name the file and the key
 * path (`policies[2].sr_prefix`) so the user can find the offending line, and
 * the reason says what was wrong and what would be accepted.
 */

/** A configuration that cannot be used. Message: `FILE:LINE: KEYPATH: REASON`. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';

  /**
   * @param file   config file, "<inline>", or "" when not known
   * @param path   key path such as `policies[2].sr_prefix`; "" for the whole file
   * @param reason what is wrong and what would be accepted
   * @param line   1-based line in the file, when known
   */
  constructor(
    readonly file: string,
    readonly path: string,
    readonly reason: string,
    readonly line?: number,
  ) {
    super(formatLocated(file, path, reason, line));
  }
}

/** Something the config loader accepted but changed or finds suspicious. */
export interface ConfigWarning {
  readonly file: string;
  readonly path: string;
  readonly reason: string;
  readonly line?: number;
  /** `FILE:LINE: KEYPATH: REASON`, ready to print. */
  readonly message: string;
}

export function configWarning(file: string, path: string, reason: string, line?: number): ConfigWarning {
  return { file, path, reason, line, message: formatLocated(file, path, reason, line) };
}

function formatLocated(file: string, path: string, reason: string, line?: number): string {
  const where = file === '' ? '' : line === undefined ? file : `${file}:${line}`;
  return [where, path, reason].filter((part) => part !== '').join(': ');
}
