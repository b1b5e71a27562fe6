"""Every numerical tolerance of schedc, in one place, each with what it guards.

Costs are floats (seconds, bytes); the same time summed in a different order, or a byte cap
scaled by a factor, differs in the last bits. The comparisons below decide feasibility, ties and
proofs; their values are part of the results (tests/test_fingerprint.py pins them).
"""

# Two floats from different sums of the same costs count as equal: memory fits its cap
# (peak <= cap * (1 + REL) + REL), a time is reached, a count of activations fits a room
# (floor(room / act + REL)); also the list schedulers' and greedies' comparisons.
REL = 1e-9

# A candidate replaces the best only when better by more than this (relative): keeps the first
# of equal schedules, so results do not depend on float noise in the last bits.
TIE = 1e-12

# The compiler calls a value optimal when it is within this (relative, and absolute) of the
# certified bound; also the MIP solvers' relative and absolute gap.
PROVEN = 1e-6

# Slack of the integer program's time rows and windows (a pair whose windows overlap by less is
# ordered by them).
MODEL = 1e-7
