"""Selections as maths: soft cuts, soft counts (Poisson-binomial and joint), object sets,
4-vectors and the observable grammar. Knows parameters and arrays, not files or executors."""
