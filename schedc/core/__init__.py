"""The rules every other part reads.

``ir``: actions, schedules and the dependency rules; ``costs``: the profile file and the memory
limit; ``cost_model``: the one place that turns a profile, a placement and a cap into per-action
durations, memory deltas and per-rank caps; ``simulate``: when each action runs and what it holds;
``validate``: whether a schedule can run; ``baselines``: the hand-made schedules; ``partition``:
contiguous splits of a per-unit profile and bounds over all of them; ``diagnose``: what limits a
step; ``limits`` and ``tolerances``: the sizes and the numerical tolerances, each in one place.
Nothing here imports the solver, the planner, the runtime or the command line.
"""
