/**
 * A time as ISO 8601 text in UTC, exactly as `Date.prototype.toISOString` writes it, without its
 * cost: a run writes some twenty times as text (its saves, its run-log rows, its run key), and in a
 * herd every run's share of CPU counts. Years outside 0-9999 and invalid dates go to `toISOString`
 * (which throws for an invalid date, as before).
 */
export function isoTime(time: Date | number): string {
  // a number is taken as `new Date(number)` takes it: whole milliseconds
  const ms = typeof time === "number" ? Math.trunc(time) : time.getTime();
  const slot = ms & (CACHE_SIZE - 1);
  if (cachedMs[slot] === ms) return cachedText[slot] as string;
  const text = ms >= FIRST_MS && ms <= LAST_MS ? format(ms) : new Date(ms).toISOString();
  cachedMs[slot] = ms;
  cachedText[slot] = text;
  return text;
}

/** A herd's runs share their slot and their lock times: the last texts, by their time's low bits. */
const CACHE_SIZE = 64;
const cachedMs: number[] = new Array<number>(CACHE_SIZE).fill(Number.NaN);
const cachedText: string[] = new Array<string>(CACHE_SIZE).fill("");

/** 0000-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z: four-digit years, written without a sign. */
const FIRST_MS = -62_167_219_200_000;
const LAST_MS = 253_402_300_799_999;
const DAY_MS = 86_400_000;
const TWO_DIGITS = Array.from({ length: 100 }, (_, n) => String(n).padStart(2, "0"));
const THREE_DIGITS = Array.from({ length: 1000 }, (_, n) => String(n).padStart(3, "0"));

function format(ms: number): string {
  const days = Math.floor(ms / DAY_MS);
  let rest = ms - days * DAY_MS;
  // the civil date of a day count (H. Hinnant's days_from_civil, inverted): 400-year eras from 0000-03-01
  const z = days + 719_468;
  const era = Math.floor(z / 146_097);
  const dayOfEra = z - era * 146_097;
  const yearOfEra = Math.floor(
    (dayOfEra -
      Math.floor(dayOfEra / 1_460) +
      Math.floor(dayOfEra / 36_524) -
      Math.floor(dayOfEra / 146_096)) /
      365,
  );
  const dayOfYear = dayOfEra - (365 * yearOfEra + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100));
  const monthFromMarch = Math.floor((5 * dayOfYear + 2) / 153);
  const day = dayOfYear - Math.floor((153 * monthFromMarch + 2) / 5) + 1;
  const month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9;
  const year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0);
  const hours = Math.floor(rest / 3_600_000);
  rest -= hours * 3_600_000;
  const minutes = Math.floor(rest / 60_000);
  rest -= minutes * 60_000;
  const seconds = Math.floor(rest / 1_000);
  const millis = rest - seconds * 1_000;
  const yearText = year >= 1000 ? String(year) : String(year).padStart(4, "0");
  return `${yearText}-${TWO_DIGITS[month]}-${TWO_DIGITS[day]}T${TWO_DIGITS[hours]}:${TWO_DIGITS[minutes]}:${TWO_DIGITS[seconds]}.${THREE_DIGITS[millis]}Z`;
}
