"""The searches behind :func:`schedc.compile`, each an engine of :mod:`schedc.solver.engine`.

Warm starts (``warm``: the hand-made schedules, ``heuristic`` list scheduling, ``zb_greedy`` and
``zb_rounds`` after the zero-bubble paper, ``v_list``, ``cooldown`` re-listing), the exact searches
(``mip``: the integer program in PuLP; ``cpsat``: the same problem in OR-Tools CP-SAT), and the
searches around an incumbent (``windows``, ``periodic``). :mod:`schedc.solver.compile` runs them as
rows of its phase table.
"""
