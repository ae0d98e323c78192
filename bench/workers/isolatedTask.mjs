// The bench's isolated handler (bench/scenarios/isolation.ts): returns at once.
export default function isolatedTask() {
  return undefined;
}
