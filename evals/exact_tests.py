"""Exact two-sided tests for success counts: right at any sample size, computed with integers.

- `fisher_exact_p`: two independent samples (successes of n_a vs of n_b). The p-value sums the
  probabilities of every 2x2 table with the same margins that is no more likely than the one
  observed (hypergeometric; the two-sided rule of R's `fisher.test` and scipy's
  `fisher_exact`).
- `mcnemar_exact_p`: paired outcomes (the same task attempts on both sides). Only discordant
  pairs count: under no difference each is as likely to favour either side, so the p-value is
  the two-sided binomial(n = discordant, 1/2) tail, doubled and capped at 1 (McNemar's exact
  test; with per-task wins and losses it is the sign test).
"""

from __future__ import annotations

from math import comb

SIGNIFICANCE = 0.05
"""p below this: "distinguishable"; at or above it: "not distinguishable"."""


def fisher_exact_p(successes_a: int, n_a: int, successes_b: int, n_b: int) -> float:
    """Two-sided p-value of Fisher's exact test on [[s_a, n_a - s_a], [s_b, n_b - s_b]]."""
    _check_counts(successes_a, n_a)
    _check_counts(successes_b, n_b)
    total, successes = n_a + n_b, successes_a + successes_b
    # weight(x): tables with x successes in A, times C(total, n_a) (integers: ties are exact)
    weights = [comb(successes, x) * comb(total - successes, n_a - x)
               for x in range(max(0, successes - n_b), min(successes, n_a) + 1)]
    observed = comb(successes, successes_a) * comb(total - successes, n_a - successes_a)
    return min(1.0, sum(w for w in weights if w <= observed) / comb(total, n_a))


def mcnemar_exact_p(a_only: int, b_only: int) -> float:
    """Two-sided p-value of McNemar's exact test: `a_only` pairs where only A succeeded,
    `b_only` where only B did (concordant pairs carry no information). 1.0 with none."""
    if a_only < 0 or b_only < 0:
        raise ValueError(f"discordant counts must be >= 0, got {a_only}, {b_only}")
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(a_only, b_only) + 1))
    return min(1.0, 2 * tail / 2**n)


def _check_counts(successes: int, n: int) -> None:
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..n, got {successes} of {n}")
