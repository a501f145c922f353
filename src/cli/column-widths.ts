/**
 * The width of each column of a text table: the longest cell in it. A loop,
 * not Math.max(...cells): spreading one argument per row overflows the stack
 * past about 120,000 rows ("Maximum call stack size exceeded"), and a
 * listing of every rule is longer than that at the tables' sizes.
 */
export function columnWidths(rows: readonly (readonly string[])[]): number[] {
  const w: number[] = rows.length === 0 ? [] : rows[0]!.map(() => 0);
  for (const r of rows) {
    for (let i = 0; i < w.length; i++) {
      const n = (r[i] ?? '').length;
      if (n > w[i]!) w[i] = n;
    }
  }
  return w;
}
