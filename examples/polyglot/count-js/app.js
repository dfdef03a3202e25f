// The polyglot topology's count, in JavaScript: a combiner aggregator, run
// within each batch (combine-groups) and at commit (combine-pairs, with the
// stored count). Counts are 64-bit integers: bigints.

import { Operators } from "weir";

const count = {
  init: () => 1n,
  combine: (a, b) => a + b,
  zero: () => 0n,
};

export const topology = () => new Operators("polyglot").aggregator("count", count);
