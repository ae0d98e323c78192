/**
 * Arithmetic on the job rows' digests (src/engine/sql/jobs.ts selectPlannedDigests): a count and
 * two sums of per-row hashes, "count:sum0:sum1". A sum over rows, so rows can be taken out of a
 * digest and others put in: the digest of every row as it was before a pass wrote some of them
 * is the digest after, less those rows after, plus those rows before.
 */
export function replaceRows(all: string, rowsNow: string, rowsBefore: string): string | undefined {
  const [total, now, before] = [parse(all), parse(rowsNow), parse(rowsBefore)];
  if (!total || !now || !before) return undefined;
  return total.map((value, index) => value - (now[index] as bigint) + (before[index] as bigint)).join(":");
}

function parse(digest: string): bigint[] | undefined {
  const parts = digest.split(":");
  if (parts.length !== 3 || !parts.every((part) => /^-?\d+$/.test(part))) return undefined;
  return parts.map((part) => BigInt(part));
}
