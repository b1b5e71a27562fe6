"""Lower bounds on the step of every schedule of a problem: the certificate behind a gap.

``chains``: combinatorial terms from chains of work that must run one after another; ``rank``:
each rank alone, every other rank free; ``pair``: two ranks together; ``anchored``: every rank's
memory at once; ``blocks``: the whole problem on a few microbatches. Each is valid for every
schedule, so the driver keeps the largest.
"""
